"""Names a peer gives us (topics, consumer and producer groups), checked before they reach a table,
a file name or a reply.

Rules (README "Protocol notes: validation"):
* topic: RocketMQ 4.9's TopicValidator: not blank, only ``%|a-zA-Z0-9_-``, at most 127 characters
  (255 for %RETRY%/%DLQ% topics, as 5.x allows, since they are built from a group name);
* group: 5.x's TopicValidator.validateGroup (4.9's broker checks none, its client allows 255): not
  blank, the same characters, at most 120 characters, so that %RETRY%<group> and %DLQ%<group> stay
  valid topics and every consume-queue directory name fits in a file name (255 bytes).

The character set is ASCII only, so a name that passes is also a safe path component (no "/", no
"..", no NUL, no newline) and encodes to UTF-8 and JSON without surprises. The check is an explicit
character loop over a set, not a regex: ``$`` in a regex matches before a final newline.
"""

from __future__ import annotations

import hmac

from rmqha.broker.support.errors import BadRequest

ALLOWED = "^[%|a-zA-Z0-9_-]+$"
TOPIC_MAX_LENGTH = 127
RETRY_OR_DLQ_TOPIC_MAX_LENGTH = 255
GROUP_MAX_LENGTH = 120

_VALID_CHARS = frozenset("%|_-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_SHOWN = 80  # characters of a bad name echoed in a remark


class InvalidName(BadRequest):
    """A topic or group name that must not be used; the message is the reply's remark."""


def has_illegal_chars(name: str) -> bool:
    return not _VALID_CHARS.issuperset(name)


def shown(name: str) -> str:
    """A bad name as it may appear in a remark or a log: bounded, escaped, printable ASCII."""
    text = name if len(name) <= _SHOWN else name[:_SHOWN] + f"...({len(name)} chars)"
    return text.encode("ascii", "backslashreplace").decode("ascii").replace("\n", "\\n")


def topic_problem(topic: str) -> str | None:
    """None when the topic name is acceptable, else why not (the reply's remark)."""
    if not topic or not topic.strip():
        return "The specified topic is blank."
    if has_illegal_chars(topic):
        return f"The specified topic[{shown(topic)}] contains illegal characters, allowing only {ALLOWED}"
    limit = RETRY_OR_DLQ_TOPIC_MAX_LENGTH if topic.startswith(("%RETRY%", "%DLQ%")) else TOPIC_MAX_LENGTH
    if len(topic) > limit:
        return f"The specified topic[{shown(topic)}] is longer than topic max length {limit}."
    return None


def group_problem(group: str) -> str | None:
    """None when the group name is acceptable, else why not (the reply's remark)."""
    if not group or not group.strip():
        return "The specified group is blank."
    if has_illegal_chars(group):
        return f"The specified group[{shown(group)}] contains illegal characters, allowing only {ALLOWED}"
    if len(group) > GROUP_MAX_LENGTH:
        return f"The specified group[{shown(group)}] is longer than group max length {GROUP_MAX_LENGTH}."
    return None


def check_topic(topic: str) -> str:
    """The topic, or InvalidName with the remark to answer."""
    why = topic_problem(topic)
    if why:
        raise InvalidName(why)
    return topic


def check_group(group: str) -> str:
    """The group, or InvalidName with the remark to answer."""
    why = group_problem(group)
    if why:
        raise InvalidName(why)
    return group


def signature_matches(expected: str, given: object) -> bool:
    """Whether a peer's signature text equals the one computed, in constant time. Compared as UTF-8
    bytes: hmac.compare_digest raises TypeError on a str that is not ASCII, and the peer chooses it
    (a lone surrogate from a JSON escape becomes "?", as Java's getBytes does)."""
    return hmac.compare_digest(expected.encode("utf-8", "replace"), str(given).encode("utf-8", "replace"))
