"""How a 4.9 broker shows the clients it knows: Connection, SubscriptionData and the heartbeat's enums,
as fastjson writes them from the broker's ClientChannelInfo and ConsumerGroupInfo.

A heartbeat keeps fields as the client sent them (the C++ client sends enums as ordinals, Java as
names; the C++ client sends subVersion as a string). 4.9 parses them into Java objects and writes them
back in one form; these functions do the same, so admin tools see 4.9's shapes whoever the client is.
No I/O.
"""

from __future__ import annotations

# Java's enums in ordinal order (common/.../heartbeat/ConsumeType, MessageModel; consumer/ConsumeFromWhere)
CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM_WHERE = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)

# MQVersion.Version ordinals the broker checks before calling a client
V3_0_7_SNAPSHOT = 28  # RESET_CONSUMER_CLIENT_OFFSET, GET_CONSUMER_STATUS_FROM_CLIENT
V3_1_8_SNAPSHOT = 62  # GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY
_V3_0_0 = (
    "V3_0_0_SNAPSHOT",
    "V3_0_0_ALPHA1",
    "V3_0_0_BETA1",
    "V3_0_0_BETA2",
    "V3_0_0_BETA3",
    "V3_0_0_BETA4",
    "V3_0_0_BETA5",
    "V3_0_0_BETA6_SNAPSHOT",
    "V3_0_0_BETA6",
    "V3_0_0_BETA7_SNAPSHOT",
    "V3_0_0_BETA7",
    "V3_0_0_BETA8_SNAPSHOT",
    "V3_0_0_BETA8",
    "V3_0_0_BETA9_SNAPSHOT",
    "V3_0_0_BETA9",
    "V3_0_0_FINAL",
)


def enum_name(value, names: tuple[str, ...]):
    """A heartbeat enum as Java holds it: a name stays, an ordinal becomes its name; anything else
    (absent, out of range) is null, as fastjson leaves a field it cannot map."""
    if isinstance(value, str):
        if value in names:
            return value
        if value.isdigit():
            value = int(value)
    if type(value) is int and 0 <= value < len(names):
        return names[value]
    return None


def version_desc(version: int) -> str:
    """MQVersion.getVersionDesc for the versions the broker refuses (below V3_1_8_SNAPSHOT); a newer
    version is only named by its number (nothing here needs the names of the 600 others)."""
    if 0 <= version < len(_V3_0_0):
        return _V3_0_0[version]
    if len(_V3_0_0) <= version < V3_1_8_SNAPSHOT + 1:
        release, snapshot = divmod(version - len(_V3_0_0), 2)  # 3.0.1 .. 3.0.15, then 3.1.0 ..
        minor, patch = (0, release + 1) if release < 15 else (1, release - 15)
        return f"V3_{minor}_{patch}" + ("_SNAPSHOT" if snapshot == 0 else "")
    return f"version {version}"


def connection_json(channel) -> dict:
    """Connection: clientId, clientAddr (RemotingHelper.parseChannelRemoteAddr: ip:port), language,
    version."""
    return {
        "clientAddr": channel.ctx.peer_address,
        "clientId": channel.client_id,
        "language": channel.language,
        "version": channel.version,
    }


def subscription_json(sub: dict, now_ms: int) -> dict:
    """SubscriptionData as 4.9 writes it back (filterClassSource is never serialized); a field the
    client left out takes Java's field default (subVersion: the current time)."""
    out = {
        "classFilterMode": sub.get("classFilterMode") is True,
        "codeSet": [c for c in _list(sub.get("codeSet")) if type(c) is int],
        "expressionType": str(sub.get("expressionType") or "TAG"),
        "subVersion": _long(sub.get("subVersion"), now_ms),
        "tagsSet": [str(t) for t in _list(sub.get("tagsSet"))],
        "topic": str(sub.get("topic", "")),
    }
    if sub.get("subString") is not None:  # fastjson leaves nulls out
        out["subString"] = str(sub["subString"])
    return out


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _long(value, default: int) -> int:
    if type(value) is int:
        return value
    try:
        return int(str(value))
    except ValueError:
        return default
