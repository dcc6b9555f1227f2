"""Which broker settings UPDATE_BROKER_CONFIG (25) may change, and how: one table, free of I/O.

RocketMQ 4.9 sets any field it has in memory and rewrites the whole config file; a key whose new value
the running broker cannot honour (a store path, the broker's identity, a port) then silently differs
from what the broker does, or corrupts the store at the next start. Here every key is in one class:

* LIVE: read at each use, so the new value is applied at once (and persisted);
* RESTART: persisted to the config file and taken at the next start (the reply says so);
* REFUSED: never changed remotely; the reply names the key and why (edit the file and restart).

Keys not in the table (4.9 keys this broker does not use, typos) are refused too. 4.9's own black list
(configBlackList, brokerConfigPath) keeps 4.9's answer, NO_PERMISSION.
"""

from __future__ import annotations

import dataclasses
import os

from rmqha.broker.config import ignored as config_ignored
from rmqha.broker.config.properties import IGNORED_KEYS, BrokerConfig, ConfigError, _convert, parse_properties

LIVE, RESTART, REFUSED = "live", "restart", "refused"

LIVE_KEYS = frozenset(
    """
brokerPermission autoCreateTopicEnable autoCreateSubscriptionGroup notifyConsumerIdsChangedEnable defaultTopicQueueNums maxMessageSize maxBatchMessages maxTopicCount
rejectTransactionMessage transactionTimeOut transactionCheckMax
fileReservedTime deleteWhen diskMaxUsedSpaceRatio cleanFileForciblyEnable destroyMapedFileIntervalForcibly
deleteCommitLogFilesInterval deleteConsumeQueueFilesInterval redeleteHangedFileInterval
""".split()
)

RESTART_KEYS = frozenset(
    """
namesrvAddr registerNameServerPeriod haMasterAddress slaveSyncMasterAddress flushIntervalCommitLog
syncFlushTimeout slaveTimeout haSendHeartbeatInterval haHousekeepingInterval haTransferBatchSize
haSlaveFallbehindMax haSocketBufferSize haReconnectMaxDelay haSlaveZeroCopy haSlaveCompiledFrames
haRecoveryEnable haRecoveryPeers haRecoveryWaitMs transactionCheckInterval flushDelayOffsetInterval
serverChannelMaxIdleTimeSeconds maxFrameLength maxHeaderLength maxClientConnections maxHeldPullRequests
maxHeldFrameBytes sendFastPath checkCRCOnRecover commitLogPreallocate traceTopicEnable msgTraceTopicName
messageIndexEnable enableDLegerCommitLog dLegerGroup dLegerPeers dLegerSelfId preferredLeaderId
cleanResourceInterval
""".split()
)

_STORE = "the store on disk was written with it; a different value at the next start misreads or loses data"
_IDENTITY = "it is this broker's identity in the cluster (name servers, clients and its master or slaves know it by it)"
_PORT = "a listening address; changing it remotely can cut off the clients, slaves and admins using it"
_SECURITY = "a security setting; change it only in the config file, on the host"
REFUSED_WHY = {
    "storePathRootDir": _STORE,
    "storePathCommitLog": _STORE,
    "storePathDLedgerCommitLog": _STORE,
    "mappedFileSizeCommitLog": _STORE,
    "mappedFileSizeConsumeQueue": _STORE,
    "maxHashSlotNum": _STORE,
    "maxIndexNum": _STORE,
    "messageDelayLevel": "delayed messages already stored wait on the current levels' queues",
    "brokerClusterName": _IDENTITY,
    "brokerName": _IDENTITY,
    "brokerId": _IDENTITY,
    "brokerRole": (
        "a role change needs a restart of the whole master/slave pair in order (README "
        '"Failover"); changed here it would break replication'
    ),
    "flushDiskType": "it is the durability promise of every send already acknowledged",
    "brokerIP1": _PORT,
    "brokerIP2": _PORT,
    "listenPort": _PORT,
    "haListenPort": _PORT,
    "metricsPort": _PORT,
    "metricsBindAddress": _SECURITY,
    "haAllowedAddresses": _SECURITY,
    "aclEnable": _SECURITY,
    "aclConfigFile": _SECURITY,
    "aclClientAccessKey": _SECURITY,
    "aclClientSecretKey": _SECURITY,
    "clusterSecretFile": _SECURITY,
    "plantBug": "deliberate defects for tests of the audit, only from the command line",
    "haCompat49": "the 4.9 comparison mode of the guarantee matrix, only from the command line",
}
BLACK_LIST = frozenset({"configBlackList", "brokerConfigPath"})  # 4.9.8's default configBlackList

_FIELDS = {f.metadata.get("name"): f for f in dataclasses.fields(BrokerConfig) if f.metadata.get("name")}


def policy(key: str) -> str:
    if key in LIVE_KEYS:
        return LIVE
    if key in RESTART_KEYS:
        return RESTART
    return REFUSED


def refusal(key: str) -> str:
    why = REFUSED_WHY.get(key)
    if why is not None:
        return f"{key} cannot be changed at run time: {why}"
    if key in IGNORED_KEYS:
        return f"{key} is a RocketMQ 4.9 setting this broker does not use"
    return f"{key} is not a setting of this broker"


class UpdateRefused(Exception):
    """An update not applied, in whole: str() is the reply's remark."""


@dataclasses.dataclass
class UpdatePlan:
    values: dict[str, object]  # dataclass attribute -> new value (converted and validated)
    text: dict[str, str]  # config key -> its new text, as it goes into the file
    live: list[str]
    restart: list[str]


def plan_update(config: BrokerConfig, props: dict[str, str]) -> UpdatePlan:
    """What applying `props` means, or UpdateRefused naming the first key that cannot change (nothing
    is applied then). Values are converted and checked as the config file's, and the whole resulting
    config is validated."""
    for key in sorted(props):
        if policy(key) == REFUSED:
            raise UpdateRefused(refusal(key))
    values, text = {}, {}
    for key, raw in sorted(props.items()):
        f = _FIELDS[key]
        try:
            values[f.name] = _convert(key, raw.strip(), f.metadata)
        except ConfigError as e:
            raise UpdateRefused(str(e)) from None
        text[key] = raw.strip()
    trial = dataclasses.replace(config, **values)
    try:
        trial.validate()
    except ConfigError as e:
        raise UpdateRefused(str(e)) from None
    return UpdatePlan(
        values, text, sorted(k for k in props if policy(k) == LIVE), sorted(k for k in props if policy(k) == RESTART)
    )


def parse_update_body(body: bytes) -> dict[str, str]:
    """The request body: java.util.Properties text (4.9's MixAll.properties2String), UTF-8."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise UpdateRefused("the body is not UTF-8 properties text") from None
    return parse_properties(text)


# -- the file -----------------------------------------------------------------------------------------
# Never sent to a peer: GET_BROKER_CONFIG needs no ACL permission in 4.9.
SECRET_KEYS = frozenset({"aclClientSecretKey"})


# Keys 4.9 leaves null by default (so its getBrokerConfig leaves them out) that this broker keeps as "".
NULL_WHEN_EMPTY = frozenset(
    {
        "storePathCommitLog",
        "storePathDLedgerCommitLog",
        "dLegerGroup",
        "dLegerPeers",
        "dLegerSelfId",
        "preferredLeaderId",
    }
)


def all_settings(config: BrokerConfig) -> dict[str, str]:
    """Every setting as 4.9.8's getBrokerConfig shows it: this broker's (the effective haListenPort,
    brokerIP2 and sync wait where the key is unset) and the 4.9 keys it does not use, with their value
    from the config file or 4.9.8's default (rmqha/broker/config/ignored.py); null ones and secrets left
    out."""
    out: dict[str, str] = {}
    for key in config_ignored.IGNORED_KEYS:
        text = config.ignored_values.get(key, config_ignored.default_text(key))
        if text is not None:
            out[key] = text
    for key, f in _FIELDS.items():
        value = getattr(config, f.name)
        if value is None or key in SECRET_KEYS or (value == "" and key in NULL_WHEN_EMPTY):
            continue
        out[key] = format_value(value)
    out["haListenPort"] = str(config.ha_port)  # 4.9's BrokerStartup sets listenPort + 1
    out["brokerIP2"] = config.brokerIP2 or config.broker_ip  # 4.9: the local address, as brokerIP1's default
    out["slaveTimeout"] = str(config.sync_wait_ms)  # the sync-replication wait this broker applies
    out["rocketmqHome"] = os.environ.get("ROCKETMQ_HOME") or os.getcwd()  # where the ACL file is looked for
    return out


def properties_text(config: BrokerConfig) -> str:
    """GET_BROKER_CONFIG's body: "key=value\\n" for every setting (all_settings), sorted by key."""
    return "".join(f"{k}={v}\n" for k, v in sorted(all_settings(config).items()))


def format_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def rewrite_properties(text: str, updates: dict[str, str]) -> str:
    """`text` (a properties file) with each key of `updates` set: its line replaced where it is (comments
    and the order kept; a value continued over several lines becomes one), the others appended."""
    out, done = [], set()
    skipping = False  # inside the continuation lines of a replaced value
    continued = False  # the previous line ended in an odd number of backslashes
    for raw in text.splitlines():
        line = raw.lstrip()
        starts = not continued and line and line[0] not in "#!"
        body = raw.rstrip("\r")
        ends_continued = (len(body) - len(body.rstrip("\\"))) % 2 == 1
        if skipping:
            skipping = ends_continued
            continued = ends_continued
            continue
        if starts:
            key = next(iter(parse_properties(body.rstrip("\\") if ends_continued else body)), None)
            if key in updates:
                out.append(f"{key}={_escape(updates[key])}")
                done.add(key)
                skipping = ends_continued
                continued = ends_continued
                continue
        out.append(raw)
        continued = ends_continued if (starts or continued) else False
    for key in sorted(updates):
        if key not in done:
            out.append(f"{key}={_escape(updates[key])}")
    return "\n".join(out) + "\n"
