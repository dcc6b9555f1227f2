"""Delay levels in the store (RocketMQ 4.9's CommitLog and ScheduleMessageService rules): where a
message with a DELAY property is stored, the deliver time its consume-queue unit carries, and the
message it becomes when due. Pure functions; rmqha/broker/managers/schedule.py does the delivering.
"""

from __future__ import annotations

from . import record

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
PROPERTY_DELAY = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
DEFAULT_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """ "1s 5s 10m 1h 2d" -> delays in ms for levels 1..n; ValueError naming the bad item."""
    out = []
    for item in text.split():
        unit, number = item[-1:], item[:-1]
        if unit not in _UNITS_MS or not number.isdigit():
            raise ValueError(f"{item!r} is not a delay: a whole number followed by s, m, h or d")
        out.append(int(number) * _UNITS_MS[unit])
    if not out:
        raise ValueError("no delay levels")
    return tuple(out)


def delay_level_of(properties: dict[str, str]) -> int:
    """Message.getDelayTimeLevel: the DELAY property as an int, 0 when absent; ValueError if not a number."""
    text = properties.get(PROPERTY_DELAY)
    if text is None:
        return 0
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"the property {PROPERTY_DELAY}={text[:40]!r} is not a number") from None


def deliver_time(levels_ms: tuple[int, ...], delay_property: str | None, store_timestamp: int) -> int | None:
    """The tagsCode of a SCHEDULE_TOPIC_XXXX unit (CommitLog.checkMessageAndReturnSize), or None when
    the record carries no usable level (its ordinary tags code stands)."""
    if delay_property is None:
        return None
    try:
        level = int(delay_property)
    except ValueError:
        return None
    level = min(level, len(levels_ms))
    if level <= 0:
        return None
    return store_timestamp + levels_ms[level - 1]


def to_schedule_topic(msg: record.Message, levels_ms: tuple[int, ...]) -> None:
    """Redirect a message with a delay level into SCHEDULE_TOPIC_XXXX (CommitLog.putMessage), in place.

    Prepared and rolled-back transaction messages are left alone, as in the reference.
    """
    level = delay_level_of(msg.properties)
    if level <= 0 or msg.transaction_type not in (record.TRANSACTION_NOT_TYPE, record.TRANSACTION_COMMIT):
        return
    if level > len(levels_ms):
        level = len(levels_ms)
        msg.properties[PROPERTY_DELAY] = str(level)
    msg.properties[PROPERTY_REAL_TOPIC] = msg.topic
    msg.properties[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    msg.topic = SCHEDULE_TOPIC
    msg.queue_id = level - 1


def time_up(stored: record.Message) -> record.Message:
    """The message to deliver for a due SCHEDULE_TOPIC_XXXX record (the reference's messageTimeup)."""
    props = dict(stored.properties)
    props.pop(PROPERTY_DELAY, None)
    return record.Message(
        topic=props.get(PROPERTY_REAL_TOPIC, ""),
        body=stored.body,
        queue_id=int(props.get(PROPERTY_REAL_QUEUE_ID, "0")),
        flag=stored.flag,
        sys_flag=stored.sys_flag & ~(record.FLAG_BORNHOST_V6 | record.FLAG_STOREHOST_V6),
        born_timestamp=stored.born_timestamp,
        born_host=stored.born_host,
        reconsume_times=stored.reconsume_times,
        properties=props,
    )
