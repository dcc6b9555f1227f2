"""The name server's settings as 4.9 shows and changes them: GET_NAMESRV_CONFIG (319) and
UPDATE_NAMESRV_CONFIG (318), IO-free.

4.9 answers GET with the fields of NamesrvConfig and NettyServerConfig as java.util.Properties text,
one `key=value` a line (null fields left out), in the order its java.util.Properties iterates them. The
tools parse the body back into a Properties and print it in that map's order, which follows the body's
order wherever two keys share a bucket: so the body here lists the keys in 4.9.8's order (BODY_ORDER,
as 4.9.8's `mqadmin getNamesrvConfig` printed them on Java 17), and mqadmin prints them as it does for
4.9.8. Its UPDATE parses a properties body, refuses the keys of its black list
(NO_PERMISSION "Can not update config in black list.") and writes every other known key into the
config objects, unknown keys silently ignored, whether or not anything reads the field again after
start-up (listenPort "changes" and nothing moves).

Here an update is all or nothing and says what it did not do: the black list as 4.9; a key read only
at start-up, an unknown key or a malformed value refused with a remark that names it; the rest applies
at once. In memory only: 4.9 also writes namesrv.properties (configStorePath), which nothing here reads
back, so kvConfigPath and configStorePath are shown with 4.9's default values but never written.
"""

from __future__ import annotations

import os

from rmqha.broker.config.properties import parse_properties
from rmqha.broker.remoting.codes import ResponseCode

# 4.9.8 NamesrvConfig.configBlackList default, plus the keys DefaultRequestProcessor always adds
BLACK_LIST = ("configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome")
BLACK_LIST_REMARK = "Can not update config in black list."
# GET_NAMESRV_CONFIG's keys in the order a 4.9.8 name server's body has them (compared 2026-11-29)
BODY_ORDER = (
    "serverSocketBacklog",
    "writeBufferHighWaterMark",
    "serverWorkerThreads",
    "serverSelectorThreads",
    "serverChannelMaxIdleTimeSeconds",
    "configBlackList",
    "writeBufferLowWaterMark",
    "serverSocketRcvBufSize",
    "serverAsyncSemaphoreValue",
    "kvConfigPath",
    "configStorePath",
    "clusterTest",
    "orderMessageEnable",
    "serverSocketSndBufSize",
    "serverOnewaySemaphoreValue",
    "serverCallbackExecutorThreads",
    "listenPort",
    "rocketmqHome",
    "productEnvName",
    "useEpollNativeSelector",
    "serverPooledByteBufAllocatorEnable",
)


def _home_path(*parts: str) -> str:
    return os.path.join(os.path.expanduser("~"), *parts)


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low not in ("true", "false"):
        raise ValueError("expected true or false")
    return low == "true"


def _seconds(text: str) -> int:
    if not text.strip().isdigit():
        raise ValueError("expected a whole number of seconds")
    value = int(text.strip())
    if not 0 <= value <= 86_400:
        raise ValueError("allowed range is 0..86400")
    return value


def _text(text: str) -> str:
    value = text.strip()
    if not value or len(value) > 255:
        raise ValueError("expected 1..255 characters")
    return value


# key -> parser, for the keys that change at run time (what each does: NameServer.apply_settings)
LIVE_KEYS = {
    "orderMessageEnable": _bool,  # GET_ROUTEINFO_BY_TOPIC adds orderTopicConf from the KV config
    "productEnvName": _text,  # shown only (4.9 reads it in cluster-test mode alone)
    "serverChannelMaxIdleTimeSeconds": _seconds,  # connections opened from now on
}


class ConfigRefused(Exception):
    def __init__(self, code: int, remark: str):
        super().__init__(remark)
        self.code = code
        self.remark = remark


class NamesrvSettings:
    def __init__(self, listen_port: int = 9876):
        self.values: dict[str, object] = {
            # NamesrvConfig (4.9.8 defaults)
            # 4.9.8's mqnamesrv refuses to start without ROCKETMQ_HOME, so its GET always has the key:
            # here the working directory stands in, as for the broker (rmqha/broker/config/policy.py)
            "rocketmqHome": os.environ.get("ROCKETMQ_HOME") or os.getcwd(),
            "kvConfigPath": _home_path("namesrv", "kvConfig.json"),
            "configStorePath": _home_path("namesrv", "namesrv.properties"),
            "productEnvName": "center",
            "clusterTest": False,
            "orderMessageEnable": False,
            "configBlackList": "configBlackList;configStorePath;kvConfigPath",
            # NettyServerConfig as NamesrvStartup sets it (listenPort 9876), system-property defaults
            "listenPort": listen_port,
            "serverWorkerThreads": 8,
            "serverCallbackExecutorThreads": 0,
            "serverSelectorThreads": 3,
            "serverOnewaySemaphoreValue": 256,
            "serverAsyncSemaphoreValue": 64,
            "serverChannelMaxIdleTimeSeconds": 120,
            "serverSocketSndBufSize": 0,
            "serverSocketRcvBufSize": 0,
            "writeBufferHighWaterMark": 0,
            "writeBufferLowWaterMark": 0,
            "serverSocketBacklog": 1024,
            "serverPooledByteBufAllocatorEnable": True,
            "useEpollNativeSelector": False,
        }

    def get(self, key: str):
        return self.values[key]

    def properties_text(self) -> str:
        """The GET_NAMESRV_CONFIG body: Java's Properties text of both config objects."""
        rank = {k: i for i, k in enumerate(BODY_ORDER)}
        keys = sorted(self.values, key=lambda k: (rank.get(k, len(rank)), k))
        return "".join(f"{k}={_java(self.values[k])}\n" for k in keys if self.values[k] is not None)

    def black_list(self) -> set[str]:
        return set(BLACK_LIST) | {k for k in str(self.values["configBlackList"]).split(";") if k}

    def update(self, text: str) -> dict[str, object]:
        """Apply a properties body; returns the changed keys with their new values, or raises
        ConfigRefused without changing anything."""
        props = parse_properties(text)
        if self.black_list() & props.keys():
            raise ConfigRefused(ResponseCode.NO_PERMISSION, BLACK_LIST_REMARK)
        unknown = sorted(k for k in props if k not in self.values)
        if unknown:
            raise ConfigRefused(
                ResponseCode.SYSTEM_ERROR,
                f"unknown name server config key(s): {', '.join(unknown)} (GET_NAMESRV_CONFIG lists the keys)",
            )
        fixed = sorted(k for k in props if k not in LIVE_KEYS)
        if fixed:
            raise ConfigRefused(
                ResponseCode.NO_PERMISSION,
                f"{', '.join(fixed)}: read only at start-up, not changed at run time; keys that "
                f"change at run time: {', '.join(sorted(LIVE_KEYS))}",
            )
        parsed = {}
        for key, raw in props.items():
            try:
                parsed[key] = LIVE_KEYS[key](raw)
            except ValueError as e:
                raise ConfigRefused(ResponseCode.SYSTEM_ERROR, f"{key}={raw!r}: {e}") from None
        changed = {k: v for k, v in parsed.items() if self.values[k] != v}
        self.values.update(parsed)
        return changed


def _java(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
