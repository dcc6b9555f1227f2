"""GET_BROKER_RUNTIME_INFO's table: every key RocketMQ 4.9.8 answers, from this broker's real state.

4.9.8 builds it from StoreStatsService.getRuntimeInfo, DefaultMessageStore.getRuntimeInfo and
AdminBrokerProcessor.prepareRuntimeInfo; every value is a string in 4.9's format (tools parse some:
`mqadmin clusterList` splits putTps and getTransferedTps on spaces). Where 4.9 describes a part this
broker does not have, the value says so truthfully: requests are served on the reactor, not from
thread-pool queues, so those queues are empty (their capacities are 4.9's defaults), and there is no
page-cache lock to be held (pageCacheLockTimeMills 0) nor transient store pool (4.9's "disabled" value).
"""

from __future__ import annotations

import os

from rmqha.broker.observability.stats import human_bytes, java_double
from rmqha.broker.store import queries
from rmqha.broker.store.delay import SCHEDULE_TOPIC
from rmqha.broker.store.retention import disk_used_ratio

# BrokerConfig 4.9.8 defaults: how many requests its thread pools may queue.
BROKER_VERSION = 409  # V4_9_8, the version this broker's behaviour follows
BROKER_VERSION_DESC = "V4_9_8"
SEND_QUEUE_CAPACITY = 10000
PULL_QUEUE_CAPACITY = 100000
QUERY_QUEUE_CAPACITY = 20000
END_TRANSACTION_QUEUE_CAPACITY = 100000
NO_TRANSIENT_POOL = 2**31 - 1  # TransientStorePool.availableBufferNums when the pool is disabled


def dir_capacity(path: str) -> str | None:
    """ "Total : 100.0 GiB, Free : 42.3 GiB." (Java's getTotalSpace and getUsableSpace), None if absent."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return f"Total : {human_bytes(st.f_blocks * st.f_frsize)}, Free : {human_bytes(st.f_bavail * st.f_frsize)}."


def earliest_message_time(store) -> int:
    """The store time of the first message in the commit log, -1 if there is none."""
    found = queries.record_at(store, store.min_offset)
    return found[1].store_timestamp if found is not None else -1


def store_part(config, store, schedule) -> dict[str, str]:
    """DefaultMessageStore.getRuntimeInfo's own keys (the StoreStatsService part comes from stats)."""
    out: dict[str, str] = {}
    commitlog = config.store_path_physic  # DLedger's data directory in DLedger mode, as 4.9.8
    ratio = disk_used_ratio(commitlog)
    out[f"commitLogDiskRatio_{commitlog}"] = java_double(ratio)
    out["commitLogDiskRatio"] = java_double(ratio)
    queues = os.path.join(config.storePathRootDir, "consumequeue")
    out["consumeQueueDiskRatio"] = java_double(disk_used_ratio(queues))
    if schedule is not None:
        for level, offset in sorted(schedule.offsets.items()):
            out[f"scheduleMessageOffset_{level}"] = f"{offset},{store.max_queue_offset(SCHEDULE_TOPIC, level - 1)}"
    out["commitLogMinOffset"] = str(store.min_offset)
    out["commitLogMaxOffset"] = str(store.max_offset)
    return out


def broker_part(config, store, flusher) -> dict[str, str]:
    """AdminBrokerProcessor.prepareRuntimeInfo's keys besides the version and the day totals."""
    durable = flusher.durable_offset if flusher is not None else store.max_offset
    out = {
        "sendThreadPoolQueueSize": "0",
        "sendThreadPoolQueueCapacity": str(SEND_QUEUE_CAPACITY),
        "pullThreadPoolQueueSize": "0",
        "pullThreadPoolQueueCapacity": str(PULL_QUEUE_CAPACITY),
        "queryThreadPoolQueueSize": "0",
        "queryThreadPoolQueueCapacity": str(QUERY_QUEUE_CAPACITY),
        "EndTransactionQueueSize": "0",
        "EndTransactionThreadPoolQueueCapacity": str(END_TRANSACTION_QUEUE_CAPACITY),
        "dispatchBehindBytes": str(store.max_offset - store.reput_offset),
        "pageCacheLockTimeMills": "0",
        "sendThreadPoolQueueHeadWaitTimeMills": "0",
        "pullThreadPoolQueueHeadWaitTimeMills": "0",
        "queryThreadPoolQueueHeadWaitTimeMills": "0",
        "earliestMessageTimeStamp": str(earliest_message_time(store)),
        "startAcceptSendRequestTimeStamp": "0",
        "remainTransientStoreBufferNumbs": str(NO_TRANSIENT_POOL),
        "remainHowManyDataToFlush": human_bytes(max(0, store.max_offset - durable)),
    }
    capacity = dir_capacity(config.storePathRootDir)
    if capacity is not None:
        out["commitLogDirCapacity"] = capacity
    return out
