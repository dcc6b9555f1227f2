"""Broker configuration read from an official RocketMQ `broker.properties` file.

Key names and defaults are RocketMQ 4.9's (HA-PROTOCOL §8), so a stock conf file reads as-is.
Keys marked "ours" are this project's additions. A bad value is a `ConfigError` that names the key
and says what is allowed. An unknown or misspelt key is a `ConfigError` at start too, with a "did you
mean" hint (aclEnable was once silently ignored); 4.9 keys this broker does not use (IGNORED_KEYS) are
accepted, so official files read as-is, and named in one WARNING at start.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass, field

from rmqha.broker.config import ignored as config_ignored
from rmqha.broker.store.delay import DEFAULT_LEVELS as DEFAULT_DELAY_LEVELS
from rmqha.broker.store.delay import parse_delay_levels

ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")
FLUSH_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")


class ConfigError(ValueError):
    pass


def parse_properties(text: str) -> dict[str, str]:
    """java.util.Properties text format: comments (# !), separators (= : whitespace), continuations."""
    out: dict[str, str] = {}
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        # An odd number of trailing backslashes continues the line.
        stripped = line.rstrip("\r")
        n = len(stripped) - len(stripped.rstrip("\\"))
        if n % 2 == 1:
            pending += stripped[:-1]
            continue
        logical.append(pending + stripped)
        pending = ""
    if pending:
        logical.append(pending)
    for line in logical:
        key, value = _split_key_value(line)
        out[_unescape(key)] = _unescape(value)
    return out


def _split_key_value(line: str) -> tuple[str, str]:
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=: \t\f":
            break
        i += 1
    key = line[:i]
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest.rstrip()


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    out, i = [], 0
    table = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if nxt == "u" and i + 6 <= len(s):
                try:
                    out.append(chr(int(s[i + 2 : i + 6], 16)))
                    i += 6
                    continue
                except ValueError:
                    pass
            out.append(table.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _default_ip() -> str:
    try:
        ip = socket.gethostbyname(socket.gethostname())
        return ip
    except OSError:
        return "127.0.0.1"


def _prop(name: str, default, *, kind=None, doc: str = "", minimum=None, maximum=None, choices=None):
    return field(
        default=default,
        metadata=dict(
            name=name, kind=kind or type(default), doc=doc, minimum=minimum, maximum=maximum, choices=choices
        ),
    )


@dataclass
class BrokerConfig:
    brokerClusterName: str = _prop("brokerClusterName", "DefaultCluster")
    brokerName: str = _prop("brokerName", "")
    brokerId: int = _prop("brokerId", 0, minimum=0)
    brokerRole: str = _prop("brokerRole", "ASYNC_MASTER", choices=ROLES)
    flushDiskType: str = _prop("flushDiskType", "ASYNC_FLUSH", choices=FLUSH_TYPES)
    namesrvAddr: str | None = _prop("namesrvAddr", None, kind=str)
    brokerIP1: str = _prop("brokerIP1", "")
    brokerIP2: str = _prop("brokerIP2", "")
    listenPort: int = _prop("listenPort", 10911, minimum=1, maximum=65535)
    haListenPort: int = _prop("haListenPort", 0, minimum=0, maximum=65535, doc="0 means listenPort + 1")
    haMasterAddress: str | None = _prop("haMasterAddress", None, kind=str)
    storePathRootDir: str = _prop("storePathRootDir", os.path.join(os.path.expanduser("~"), "store"))
    storePathCommitLog: str = _prop("storePathCommitLog", "")
    mappedFileSizeCommitLog: int = _prop("mappedFileSizeCommitLog", 1024 * 1024 * 1024, minimum=4096)
    mappedFileSizeConsumeQueue: int = _prop("mappedFileSizeConsumeQueue", 300000 * 20, minimum=20)
    flushIntervalCommitLog: int = _prop("flushIntervalCommitLog", 500, minimum=1)
    syncFlushTimeout: int = _prop("syncFlushTimeout", 5000, minimum=1)
    # 4.9.3+ bounds the sync-replication wait with slaveTimeout (default 3000 ms) and 4.9.0-4.9.2 with
    # syncFlushTimeout; here syncFlushTimeout stays the default and slaveTimeout wins when set.
    slaveTimeout: int | None = _prop("slaveTimeout", None, kind=int, minimum=1)
    haSendHeartbeatInterval: int = _prop("haSendHeartbeatInterval", 5000, minimum=1)
    haHousekeepingInterval: int = _prop("haHousekeepingInterval", 20000, minimum=1)
    haTransferBatchSize: int = _prop("haTransferBatchSize", 32768, minimum=1, maximum=4 * 1024 * 1024)
    haSlaveFallbehindMax: int = _prop("haSlaveFallbehindMax", 256 * 1024 * 1024, minimum=0)
    checkCRCOnRecover: bool = _prop("checkCRCOnRecover", True)
    autoCreateTopicEnable: bool = _prop("autoCreateTopicEnable", True)
    autoCreateSubscriptionGroup: bool = _prop("autoCreateSubscriptionGroup", True)
    notifyConsumerIdsChangedEnable: bool = _prop(
        "notifyConsumerIdsChangedEnable",
        True,
        doc="4.9: tell a group's consumers to rebalance when a member joins or leaves (the group's own flag too)",
    )
    defaultTopicQueueNums: int = _prop("defaultTopicQueueNums", 8, minimum=1, maximum=1024)
    brokerPermission: int = _prop("brokerPermission", 6, minimum=0, maximum=15)
    registerNameServerPeriod: int = _prop("registerNameServerPeriod", 30000, minimum=10000, maximum=60000)
    # ours
    metricsPort: int = _prop("metricsPort", 0, minimum=0, maximum=65535, doc="ours; 0 means listenPort + 2")
    haSocketBufferSize: int = _prop(
        "haSocketBufferSize",
        64 * 1024,
        minimum=0,
        doc="ours; SO_SNDBUF/SO_RCVBUF on HA sockets (reference: 64 KiB), 0 = OS default",
    )
    haReconnectMaxDelay: int = _prop(
        "haReconnectMaxDelay",
        1000,
        minimum=10,
        doc="ours; the slave retries its master with backoff up to this many ms",
    )
    haSlaveZeroCopy: bool = _prop(
        "haSlaveZeroCopy",
        True,
        doc="ours; the slave splices replicated bytes socket -> pipe -> commit log "
        "(Linux) instead of reading them into Python (false: recv_into + pwrite)",
    )
    haSlaveCompiledFrames: bool = _prop(
        "haSlaveCompiledFrames",
        True,
        doc="ours; with haSlaveZeroCopy, the frame loop (read a header, splice "
        "its body) runs in C (rmqha/broker/ha/_frames.c) when it is built",
    )
    haCompat49: bool = _prop(
        "haCompat49",
        False,
        doc="ours, for comparisons only (the guarantee matrix's 4.9 column): the master "
        "behaves as Apache RocketMQ 4.9 does where this broker deliberately differs: "
        "a connection's first report is taken unchecked (it raises push2SlaveMaxOffset "
        "and streaming starts there, even past the log), every connection counts as a "
        "slave, the sync wait is slaveTimeout, 3000 ms when unset, as in 4.9.3+, and "
        "with SYNC_FLUSH the store forces everything written every 10 ms (a slave's "
        "replicated bytes too), as 4.9's GroupCommitService does; never in production",
    )
    haRecoveryEnable: bool = _prop(
        "haRecoveryEnable",
        False,
        doc='ours (README "Recovery without stranding"): a master that starts after an '
        "unclean shutdown holds writes and fetches what its slaves "
        "(haRecoveryPeers) hold past its log, verified record by record, before "
        "it takes a write; a slave serves its log on its HA port for that",
    )
    haRecoveryPeers: str = _prop(
        "haRecoveryPeers",
        "",
        doc="ours; the HA ports (host:port, comma-separated) of the slaves a "
        "recovering master fetches from, in order; required on a master with "
        "haRecoveryEnable; an IP not proven a replica (store/haPeers.json) is "
        "skipped with an ERROR",
    )
    haRecoveryWaitMs: int = _prop(
        "haRecoveryWaitMs",
        30000,
        minimum=0,
        doc="ours; the longest a recovering master holds writes for its slaves to "
        "answer; then it takes writes as without recovery",
    )
    aclEnable: bool = _prop(
        "aclEnable",
        False,
        doc='4.9\'s ACL (README "ACL"): every request checked against plain_acl.yml '
        "(accounts, signatures, topic and group permissions), reloaded when it changes",
    )
    aclConfigFile: str = _prop(
        "aclConfigFile", "", doc="ours; the ACL file (default: $ROCKETMQ_HOME/conf/plain_acl.yml, as 4.9)"
    )
    clusterSecretFile: str = _prop(
        "clusterSecretFile",
        "",
        doc="ours; a file holding the cluster secret: REGISTER_BROKER and "
        "UNREGISTER_BROKER are signed with it, for a name server started with "
        '--cluster-secret-file (README "ACL")',
    )
    traceTopicEnable: bool = _prop(
        "traceTopicEnable",
        False,
        doc="4.9: the broker creates the message-trace topic (msgTraceTopicName, one "
        "queue) at start, where clients with trace on send their trace records",
    )
    msgTraceTopicName: str = _prop("msgTraceTopicName", "RMQ_SYS_TRACE_TOPIC")
    metricsBindAddress: str = _prop(
        "metricsBindAddress",
        "127.0.0.1",
        doc="ours; the interface /metrics and /status listen on: loopback by default "
        "(they are unauthenticated); 0.0.0.0 to scrape from elsewhere",
    )
    haAllowedAddresses: str = _prop(
        "haAllowedAddresses",
        "",
        doc="ours; IP addresses (comma-separated) allowed to connect to the HA port "
        "(a master's slaves; a slave's recovering master); empty: anyone, as 4.9",
    )
    maxHeldFrameBytes: int = _prop(
        "maxHeldFrameBytes",
        256 * 1024 * 1024,
        minimum=0,
        doc="ours; bytes all client connections together may hold in frames not yet "
        "complete or served; the connection that passes it is closed (0: no cap)",
    )
    aclClientAccessKey: str = _prop(
        "aclClientAccessKey",
        "",
        doc="ours; the account a slave signs its requests to its master with (topic, "
        "offset and delay-offset sync) when the master has aclEnable; 4.9 leaves "
        "them unsigned and relies on globalWhiteRemoteAddresses",
    )
    aclClientSecretKey: str = _prop("aclClientSecretKey", "")
    maxMessageSize: int = _prop("maxMessageSize", 4 * 1024 * 1024, minimum=1)
    sendFastPath: bool = _prop(
        "sendFastPath",
        True,
        doc="ours; plain sends are read and encoded by the compiled accelerator "
        "(rmqha/broker/fastpath) when it is built; false: the Python path for every send",
    )
    plantBug: str = _prop(
        "plantBug",
        "",
        doc="ours, tests only: comma-separated deliberate defects "
        "(rmqha/controls/planted.py) that show the audit's checkers can fail; the process entry checks the names",
    )
    # Transactional messages (BrokerConfig 4.9.8; README "Transactional messages").
    transactionTimeOut: int = _prop(
        "transactionTimeOut", 6000, minimum=0, doc="ms after its birth before a half message is checked"
    )
    transactionCheckMax: int = _prop(
        "transactionCheckMax",
        15,
        minimum=0,
        doc="checks of one half message before it is moved to TRANS_CHECK_MAX_TIME_TOPIC",
    )
    transactionCheckInterval: int = _prop(
        "transactionCheckInterval", 60000, minimum=1, doc="ms between two runs of the transaction check (masters only)"
    )
    rejectTransactionMessage: bool = _prop(
        "rejectTransactionMessage", False, doc="refuse half messages with NO_PERMISSION"
    )
    messageDelayLevel: str = _prop(
        "messageDelayLevel",
        DEFAULT_DELAY_LEVELS,
        doc="the delay of each level, 1 first: whole numbers with s, m, h or d",
    )
    flushDelayOffsetInterval: int = _prop(
        "flushDelayOffsetInterval", 10000, minimum=1, doc="ms between writes of config/delayOffset.json"
    )
    # Bounds on what one peer can make the broker hold or do (README "Limits").
    serverChannelMaxIdleTimeSeconds: int = _prop(
        "serverChannelMaxIdleTimeSeconds",
        120,
        minimum=0,
        doc="a client connection with nothing read or written for this long is closed (Java's "
        "NettyServerConfig); 0 = never",
    )
    maxFrameLength: int = _prop(
        "maxFrameLength",
        16 * 1024 * 1024,
        minimum=1024,
        maximum=(1 << 31) - 1,
        doc="ours (Java: -Dcom.rocketmq.remoting.frameMaxLength); a longer frame closes the connection",
    )
    maxHeaderLength: int = _prop(
        "maxHeaderLength",
        1024 * 1024,
        minimum=1024,
        maximum=(1 << 24) - 1,
        doc="ours; a longer remoting header closes the connection",
    )
    maxClientConnections: int = _prop(
        "maxClientConnections", 4096, minimum=1, doc="ours; connections beyond this on listenPort are closed at once"
    )
    maxBatchMessages: int = _prop(
        "maxBatchMessages",
        10000,
        minimum=1,
        doc="ours; messages in one SEND_BATCH_MESSAGE (the batch's bytes are "
        "bounded by maxMessageSize as in the reference)",
    )
    maxTopicCount: int = _prop(
        "maxTopicCount",
        10000,
        minimum=16,
        doc="ours; topics this broker holds (each is a persisted entry, a registration "
        "with the name servers and consume-queue files); creating more is refused",
    )
    maxHeldPullRequests: int = _prop(
        "maxHeldPullRequests",
        10000,
        minimum=0,
        doc="ours; long-polling pulls held at once; beyond it a pull with "
        "nothing to read is answered PULL_NOT_FOUND at once",
    )
    slaveSyncMasterAddress: str | None = _prop(
        "slaveSyncMasterAddress",
        None,
        kind=str,
        doc="ours; host:port a slave uses to copy topic config and consumer offsets from its master, "
        "instead of the master's registered address (for containers, where that address is the host's)",
    )
    commitLogPreallocate: bool = _prop(
        "commitLogPreallocate", True, doc="ours; reserve each commit-log file's blocks when it is created"
    )
    # The message index (MessageStoreConfig 4.9.8; README "The message index"): each index file is
    # 40 + maxHashSlotNum*4 + maxIndexNum*20 bytes, created sparse (420 MB with these defaults).
    messageIndexEnable: bool = _prop(
        "messageIndexEnable", True, doc="index each stored message's UNIQ_KEY and KEYS (store/index/)"
    )
    maxHashSlotNum: int = _prop("maxHashSlotNum", 5000000, minimum=1, doc="hash slots of one index file")
    maxIndexNum: int = _prop(
        "maxIndexNum", 5000000 * 4, minimum=2, doc="index items of one index file (item 0 is never used)"
    )

    # Commit-log retention (MessageStoreConfig 4.9.8; rmqha/broker/store/retention.py), read at each use.
    fileReservedTime: int = _prop(
        "fileReservedTime", 72, minimum=0, doc="hours a commit-log file is kept after its last write"
    )
    deleteWhen: str = _prop("deleteWhen", "04", doc="the hours (local time, ;-separated) expired files are deleted in")
    diskMaxUsedSpaceRatio: int = _prop(
        "diskMaxUsedSpaceRatio", 75, doc="percent of the disk past which expired files go at any hour (10..95)"
    )
    cleanResourceInterval: int = _prop("cleanResourceInterval", 10000, minimum=1, doc="ms between two cleaning runs")
    cleanFileForciblyEnable: bool = _prop(
        "cleanFileForciblyEnable", True, doc="past 85% of the disk, delete the oldest files whatever their age"
    )
    destroyMapedFileIntervalForcibly: int = _prop(
        "destroyMapedFileIntervalForcibly", 120000, minimum=0, doc="ms a file still being sent may delay its deletion"
    )
    deleteCommitLogFilesInterval: int = _prop(
        "deleteCommitLogFilesInterval", 100, minimum=0, doc="ms between two commit-log file deletions"
    )
    deleteConsumeQueueFilesInterval: int = _prop(
        "deleteConsumeQueueFilesInterval", 100, minimum=0, doc="ms after a consume queue that deleted files"
    )
    redeleteHangedFileInterval: int = _prop(
        "redeleteHangedFileInterval", 120000, minimum=0, doc="4.9: ms between retries of a hung first file"
    )

    # DLedger mode (4.9's MessageStoreConfig; rmqha/broker/store/dledger_commitlog.py, docs/dledger.md): the commit
    # log is replicated by a DLedger (Raft) group; brokerId/brokerRole come from the elected role.
    enableDLegerCommitLog: bool = _prop(
        "enableDLegerCommitLog", False, doc="store the commit log in DLedger; the leader is the master"
    )
    dLegerGroup: str = _prop("dLegerGroup", "", doc="DLedger group (4.9 advises the brokerName)")
    dLegerPeers: str = _prop("dLegerPeers", "", doc="n0-host:port;n1-host:port;... (DLedger's own ports)")
    dLegerSelfId: str = _prop("dLegerSelfId", "", doc="this node's id in dLegerPeers: a letter and a number")
    preferredLeaderId: str = _prop("preferredLeaderId", "", doc="DLedger preferredLeaderIds (;-list)")
    storePathDLedgerCommitLog: str = _prop(
        "storePathDLedgerCommitLog",
        "",
        doc="DLedger's data directory; empty: <storePathRootDir>/dledger-<selfId>/data, as 4.9",
    )

    # Set by from_properties: 4.9 keys present in the file that this broker accepts and does not use, and
    # their values (GET_BROKER_CONFIG shows them; rmqha/broker/config/ignored.py has the rest's defaults).
    ignored_keys: list[str] = field(default_factory=list, metadata=dict(name=None))
    ignored_values: dict[str, str] = field(default_factory=dict, metadata=dict(name=None))
    # Set by load: the file read, where UPDATE_BROKER_CONFIG persists (rmqha/broker/config/policy.py).
    config_path: str | None = field(default=None, metadata=dict(name=None))

    # -- derived ------------------------------------------------------------------------------
    @property
    def is_master(self) -> bool:
        return self.brokerRole != "SLAVE"

    @property
    def is_sync_master(self) -> bool:
        return self.brokerRole == "SYNC_MASTER"

    @property
    def ha_port(self) -> int:
        return self.haListenPort or self.listenPort + 1

    @property
    def metrics_port(self) -> int:
        return self.metricsPort or self.listenPort + 2

    @property
    def fast_listen_port(self) -> int:
        """4.9's VIP channel (fastListenPort): always listenPort - 2, no key of its own."""
        return self.listenPort - 2

    @property
    def broker_ip(self) -> str:
        return self.brokerIP1 or _default_ip()

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip}:{self.listenPort}"

    @property
    def ha_server_addr(self) -> str:
        return f"{self.brokerIP2 or self.broker_ip}:{self.ha_port}"

    @property
    def commitlog_dir(self) -> str:
        return self.storePathCommitLog or os.path.join(self.storePathRootDir, "commitlog")

    @property
    def store_path_physic(self) -> str:
        """4.9's getStorePathPhysic: where the commit log's bytes are, DLedger's data directory in DLedger
        mode (its disk ratio is GET_BROKER_RUNTIME_INFO's commitLogDiskRatio and drives retention)."""
        return self.dledger_data_dir if self.enableDLegerCommitLog else self.commitlog_dir

    @property
    def planted_bugs(self) -> frozenset[str]:
        """The names plantBug lists (the controls that know them check them: rmqha/broker/__main__.py)."""
        return frozenset(n.strip() for n in self.plantBug.split(",") if n.strip())

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        return parse_delay_levels(self.messageDelayLevel)

    @property
    def recovery_peers(self) -> list[str]:
        return [a.strip() for a in self.haRecoveryPeers.split(",") if a.strip()]

    @property
    def ha_allowed(self) -> frozenset[str] | None:
        """The addresses haAllowedAddresses names (None: anyone)."""
        items = [a.strip().strip("[]") for a in self.haAllowedAddresses.split(",") if a.strip()]
        return frozenset(items) if items else None

    @property
    def acl_client_credentials(self) -> tuple[str, str] | None:
        return (self.aclClientAccessKey, self.aclClientSecretKey) if self.aclClientAccessKey else None

    @property
    def flush_interval_ms(self) -> int:
        """How often the flush service forces what no send waits for (a slave's replicated bytes, ASYNC_FLUSH).
        4.9's SYNC_FLUSH GroupCommitService wakes every 10 ms and then forces everything written, waited
        for or not (4.9.8 CommitLog.GroupCommitService.run/doCommit: waitForRunning(10), flush(0)); ours
        forces such bytes at flushIntervalCommitLog."""
        if self.haCompat49 and self.flushDiskType == "SYNC_FLUSH":
            return 10
        return self.flushIntervalCommitLog

    @property
    def sync_wait_ms(self) -> int:
        if self.slaveTimeout is not None:
            return self.slaveTimeout
        # 4.9.3-4.9.8 CommitLog.submitReplicaRequest: GroupCommitRequest(..., getSlaveTimeout()), 3000 by default
        return 3000 if self.haCompat49 else self.syncFlushTimeout

    # -- loading ------------------------------------------------------------------------------
    @classmethod
    def from_properties(cls, props: dict[str, str]) -> "BrokerConfig":
        by_name = {f.metadata.get("name"): f for f in dataclasses.fields(cls) if f.metadata.get("name")}
        values, unknown = {}, []
        for key, raw in props.items():
            f = by_name.get(key)
            if f is None:
                if key not in IGNORED_KEYS:
                    unknown.append(key)
                continue
            values[f.name] = _convert(key, raw.strip(), f.metadata)
        if unknown:
            # a misspelt key would otherwise be a setting silently not applied (aclEnable once was)
            import difflib

            known = sorted(set(by_name) | IGNORED_KEYS)
            hints = []
            for k in sorted(unknown):
                close = difflib.get_close_matches(k, known, n=1)
                hints.append(f"{k} (did you mean {close[0]}?)" if close else k)
            raise ConfigError(
                f"unknown config key(s): {', '.join(hints)}; every key this broker reads is "
                "listed by `python -m rmqha.broker -c FILE --check` and in the README's Configuration"
            )
        cfg = cls(**values)
        cfg.ignored_keys = sorted(k for k in props if k in IGNORED_KEYS)
        cfg.ignored_values = {k: props[k].strip() for k in cfg.ignored_keys}
        cfg.validate()
        return cfg

    @classmethod
    def load(cls, path: str, overrides: dict[str, str] | None = None) -> "BrokerConfig":
        try:
            with open(path, encoding="utf-8") as fh:
                props = parse_properties(fh.read())
        except OSError as e:
            raise ConfigError(f"cannot read config file {path}: {e.strerror}") from e
        props.update(overrides or {})
        if "namesrvAddr" not in props and os.environ.get("NAMESRV_ADDR"):
            props["namesrvAddr"] = os.environ["NAMESRV_ADDR"]
        cfg = cls.from_properties(props)
        cfg.config_path = path
        return cfg

    def validate(self) -> None:
        if not self.brokerName:
            self.brokerName = socket.gethostname()
        if self.enableDLegerCommitLog:
            self._validate_dledger()
        elif self.brokerRole == "SLAVE" and self.brokerId == 0:
            raise ConfigError(
                "brokerId=0 is the master's id; a SLAVE needs brokerId >= 1 "
                "(set brokerId=1, or brokerRole=ASYNC_MASTER/SYNC_MASTER)"
            )
        if self.brokerRole != "SLAVE" and self.brokerId != 0 and not self.enableDLegerCommitLog:
            raise ConfigError(
                f"brokerRole={self.brokerRole} needs brokerId=0 (got {self.brokerId}); "
                "slaves use brokerId >= 1 with brokerRole=SLAVE"
            )
        for key in ("haMasterAddress", "slaveSyncMasterAddress"):
            if getattr(self, key):
                _check_addr(key, getattr(self, key))
        try:
            parse_delay_levels(self.messageDelayLevel)
        except ValueError as e:
            raise ConfigError(
                f"messageDelayLevel={self.messageDelayLevel!r}: {e}; for example "
                f"messageDelayLevel={DEFAULT_DELAY_LEVELS}"
            ) from None
        if not all(p.strip().isascii() and p.strip().isdigit() for p in self.deleteWhen.split(";")):
            raise ConfigError(
                f"deleteWhen={self.deleteWhen!r}: expected hours of the day separated by ';', for example 04 or 04;16"
            )
        if self.namesrvAddr:
            for a in self.namesrvAddr.split(";"):
                if a.strip():
                    _check_addr("namesrvAddr", a.strip())
        index_file = 40 + self.maxHashSlotNum * 4 + self.maxIndexNum * 20
        if index_file > (1 << 31) - 1:
            raise ConfigError(
                f"maxHashSlotNum={self.maxHashSlotNum} and maxIndexNum={self.maxIndexNum} make "
                f"index files of {index_file} bytes; 40 + maxHashSlotNum*4 + maxIndexNum*20 must "
                f"stay below 2 GiB (the defaults are 5000000 and 20000000)"
            )
        for a in self.recovery_peers:
            _check_addr("haRecoveryPeers", a)
        if self.haRecoveryEnable and self.is_master and not self.recovery_peers:
            raise ConfigError(
                "haRecoveryEnable=true on a master needs haRecoveryPeers (its slaves' HA ports, "
                "host:port): without a source a recovering master would fetch nothing"
            )
        if bool(self.aclClientAccessKey) != bool(self.aclClientSecretKey):
            raise ConfigError("aclClientAccessKey and aclClientSecretKey go together")
        import ipaddress

        for a in self.ha_allowed or ():
            try:
                ipaddress.ip_address(a)
            except ValueError:
                raise ConfigError(f"haAllowedAddresses: {a!r} is not an IP address") from None
        try:
            ipaddress.ip_address(self.metricsBindAddress)
        except ValueError:
            raise ConfigError(
                f"metricsBindAddress: {self.metricsBindAddress!r} is not an IP address "
                "(127.0.0.1 for this machine only, 0.0.0.0 for every interface)"
            ) from None
        if self.fast_listen_port < 1:
            raise ConfigError(
                f"listenPort={self.listenPort}: must be at least 3, as the VIP channel listens on listenPort - 2"
            )
        ports = {
            "listenPort": self.listenPort,
            "haListenPort": self.ha_port,
            "metricsPort": self.metrics_port,
            "fastListenPort (listenPort - 2)": self.fast_listen_port,
        }
        if len(set(ports.values())) != len(ports):
            raise ConfigError(f"ports must differ: {ports}")

    def _validate_dledger(self) -> None:
        """4.9 (BrokerStartup, DLedgerCommitLog): brokerId is -1 until the first role event; the node's
        slave id is dLegerSelfId's number + 1, so the id is a letter and an integer (n0, n1, ...)."""
        peers = dledger_peers(self.dLegerPeers)
        if not self.dLegerGroup:
            raise ConfigError(
                "dLegerGroup is empty: enableDLegerCommitLog=true needs the DLedger group "
                "(4.9 advises dLegerGroup = brokerName)"
            )
        if dledger_slave_id(self.dLegerSelfId) is None:
            raise ConfigError(
                f"dLegerSelfId={self.dLegerSelfId!r}: expected one letter and an integer "
                "(n0, n1, ...): 4.9 takes the broker id of a follower from the number"
            )
        if self.dLegerSelfId not in peers:
            raise ConfigError(f"dLegerSelfId={self.dLegerSelfId!r} is not in dLegerPeers ({', '.join(peers)})")
        for pid in filter(None, self.preferredLeaderId.split(";")):
            if pid not in peers:
                raise ConfigError(f"preferredLeaderId: {pid!r} is not in dLegerPeers ({', '.join(peers)})")
        self._validate_dledger_data_dir()
        own = int(peers[self.dLegerSelfId].rpartition(":")[2])
        if own in (self.listenPort, self.ha_port, self.metrics_port, self.fast_listen_port):
            raise ConfigError(
                f"dLegerPeers: {self.dLegerSelfId}'s port {own} is one of this broker's other "
                "ports (listenPort, haListenPort, metricsPort, listenPort - 2)"
            )
        self.brokerId = -1

    def _validate_dledger_data_dir(self) -> None:
        """storePathDLedgerCommitLog: one directory of its own. 4.9 takes a `,`-list as DLedger's
        multi-path data store, which this broker does not have."""
        value = self.storePathDLedgerCommitLog
        if not value:
            return
        if "," in value:
            raise ConfigError(
                f"storePathDLedgerCommitLog={value!r}: several paths (DLedger's multi-path data store) "
                "are not supported; give one directory"
            )
        if value != value.strip() or "\0" in value:
            raise ConfigError(f"storePathDLedgerCommitLog={value!r}: not a usable path")
        data = os.path.realpath(value)
        base = os.path.realpath(os.path.join(self.storePathRootDir, f"dledger-{self.dLegerSelfId}"))
        taken = {
            os.path.realpath(self.commitlog_dir): "the classic commit log (storePathCommitLog)",
            os.path.realpath(self.storePathRootDir): "storePathRootDir itself",
            os.path.join(base, "index"): "DLedger's index directory",
            base: "DLedger's own directory (data goes in a directory of its own)",
        }
        for name in ("consumequeue", "index", "config"):
            taken[os.path.realpath(os.path.join(self.storePathRootDir, name))] = f"the store's {name}/"
        if data in taken:
            raise ConfigError(
                f"storePathDLedgerCommitLog={value!r} is {taken[data]}; give DLedger a directory of its own"
            )
        if os.path.exists(data) and not os.path.isdir(data):
            raise ConfigError(f"storePathDLedgerCommitLog={value!r} exists and is not a directory")

    @property
    def dledger_data_dir(self) -> str:
        """DLedgerConfig.getDataStorePath: storePathDLedgerCommitLog, else <root>/dledger-<selfId>/data."""
        return self.storePathDLedgerCommitLog or os.path.join(
            self.storePathRootDir, f"dledger-{self.dLegerSelfId}", "data"
        )


def dledger_peers(value: str) -> dict[str, str]:
    """dLegerPeers (`n0-host:port;n1-host:port`) as id -> host:port; a ConfigError naming the key."""
    out: dict[str, str] = {}
    for item in filter(None, (v.strip() for v in (value or "").split(";"))):
        pid, sep, addr = item.partition("-")
        if not sep or not pid:
            raise ConfigError(f"dLegerPeers: {item!r} is not id-host:port (for example n0-127.0.0.1:40911)")
        _check_addr("dLegerPeers", addr)
        if pid in out:
            raise ConfigError(f"dLegerPeers: {pid!r} appears twice")
        out[pid] = addr
    if not out:
        raise ConfigError(
            "dLegerPeers is empty: enableDLegerCommitLog=true needs the group's members, "
            "for example dLegerPeers=n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913"
        )
    return out


def dledger_slave_id(self_id: str) -> int | None:
    """The brokerId 4.9 gives a follower: int(selfId.substring(1)) + 1 (DLedgerCommitLog's id)."""
    rest = self_id[1:]
    if len(self_id) < 2 or not rest.isdigit() or not rest.isascii():
        return None
    return int(rest) + 1


IGNORED_KEYS = config_ignored.IGNORED_KEYS  # 4.9 keys accepted and not used (shown by GET_BROKER_CONFIG)


def _convert(key: str, raw: str, meta: dict):
    kind = meta["kind"]
    if kind is bool:
        low = raw.lower()
        if low not in ("true", "false"):
            raise ConfigError(f"{key}={raw!r}: expected true or false")
        return low == "true"
    if kind is int:
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(f"{key}={raw!r}: expected an integer") from None
        lo, hi = meta.get("minimum"), meta.get("maximum")
        if lo is not None and value < lo or hi is not None and value > hi:
            allowed = f"{lo if lo is not None else '-inf'}..{hi if hi is not None else 'inf'}"
            raise ConfigError(f"{key}={value}: allowed range is {allowed}")
        return value
    choices = meta.get("choices")
    if choices and raw not in choices:
        raise ConfigError(f"{key}={raw!r}: allowed values are {', '.join(choices)}")
    return raw


def _check_addr(key: str, addr: str) -> None:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{key}={addr!r}: expected host:port, for example 127.0.0.1:10912")
