"""The rocketmq-exporter's metric names on this broker's /metrics, so the community Grafana dashboards
(apache/rocketmq-exporter's rocketmq_exporter*.json) read a broker of this project as they read the
exporter's output.

Names, labels and values as the exporter's RMQMetricsCollector and MetricsCollectTask make them, from
the same sources (GET_BROKER_RUNTIME_INFO's table, VIEW_BROKER_STATS_DATA's minute window, consumer
offsets), each broker describing itself:

* rocketmq_brokeruntime_*{cluster, brokerIP, brokerHost, des, boottime, broker_version}: the runtime
  table's numbers (brokerIP is this broker's address, brokerHost "", as the exporter sends them);
* rocketmq_broker_tps / _qps{cluster, brokerIP, broker}: BROKER_PUT_NUMS / BROKER_GET_NUMS per second
  over the last minute;
* rocketmq_producer_tps / _message_size{cluster, broker, topic}, rocketmq_consumer_tps /
  _message_size{cluster, broker, topic, group}, rocketmq_send_back_nums (the minute's sum);
* rocketmq_group_diff / _retrydiff{group, topic, countOfOnlineConsumers, msgModel}: messages not yet
  consumed in this broker's queues, for clustering groups (msgModel "1", CLUSTERING's ordinal);
* rocketmq_broker_commitlog_diff{cluster, brokerIP, broker}: a master's max offset minus each slave's
  acknowledged offset. The exporter asks both brokers for their max offsets and labels the slave's
  client address; a master knows its slaves by their HA connections, so brokerIP is that address.

Only what this broker measures: the exporter's client-side metrics (consume RT, failed messages) come
from the clients and are not here.
"""

from __future__ import annotations

from rmqha.broker.observability import stats as st
from rmqha.broker.observability.runtime_info import BROKER_VERSION

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
CLUSTERING = "1"  # MessageModel.CLUSTERING.ordinal()

# rocketmq_brokeruntime_<name> -> runtime table key (numbers as they are)
RUNTIME_GAUGES = {
    "msg_put_total_today_now": "msgPutTotalTodayNow",
    "msg_gettotal_today_now": "msgGetTotalTodayNow",
    "msg_gettotal_yesterdaymorning": "msgGetTotalYesterdayMorning",
    "msg_puttotal_yesterdaymorning": "msgPutTotalYesterdayMorning",
    "msg_gettotal_todaymorning": "msgGetTotalTodayMorning",
    "msg_puttotal_todaymorning": "msgPutTotalTodayMorning",
    "dispatch_behind_bytes": "dispatchBehindBytes",
    "put_message_size_total": "putMessageSizeTotal",
    "put_message_average_size": "putMessageAverageSize",
    "query_threadpool_queue_capacity": "queryThreadPoolQueueCapacity",
    "remain_transientstore_buffer_numbs": "remainTransientStoreBufferNumbs",
    "earliest_message_timestamp": "earliestMessageTimeStamp",
    "putmessage_entire_time_max": "putMessageEntireTimeMax",
    "start_accept_sendrequest_time": "startAcceptSendRequestTimeStamp",
    "send_threadpool_queue_size": "sendThreadPoolQueueSize",
    "putmessage_times_total": "putMessageTimesTotal",
    "getmessage_entire_time_max": "getMessageEntireTimeMax",
    "pagecache_lock_time_mills": "pageCacheLockTimeMills",
    "commitlog_disk_ratio": "commitLogDiskRatio",
    "consumequeue_disk_ratio": "consumeQueueDiskRatio",
    "dispatch_maxbuffer": "dispatchMaxBuffer",
    "pull_threadpoolqueue_capacity": "pullThreadPoolQueueCapacity",
    "send_threadpoolqueue_capacity": "sendThreadPoolQueueCapacity",
    "pull_threadpoolqueue_size": "pullThreadPoolQueueSize",
    "query_threadpoolqueue_size": "queryThreadPoolQueueSize",
    "pull_threadpoolqueue_headwait_timemills": "pullThreadPoolQueueHeadWaitTimeMills",
    "query_threadpoolqueue_headwait_timemills": "queryThreadPoolQueueHeadWaitTimeMills",
    "send_threadpoolqueue_headwait_timemills": "sendThreadPoolQueueHeadWaitTimeMills",
    "commitlog_maxoffset": "commitLogMaxOffset",
    "commitlog_minoffset": "commitLogMinOffset",
    "put_latency_99": "putLatency99",
    "put_latency_999": "putLatency999",
}
# rocketmq_brokeruntime_<name><window> -> the StoreStats sample series
TPS_GAUGES = {"put_tps": "put", "getfound_tps": "found", "getmiss_tps": "miss", "gettransfered_tps": "transferred"}
# rocketmq_brokeruntime_pmdt_<name>, in putMessageDistributeTime's order
PMDT_NAMES = (
    "0ms",
    "0to10ms",
    "10to50ms",
    "50to100ms",
    "100to200ms",
    "200to500ms",
    "500to1s",
    "1to2s",
    "2to3s",
    "3to4s",
    "4to5s",
    "5to10s",
    "10stomore",
)


class ExporterMetrics:
    def __init__(self, config, controller, runtime_table, offsets=None, clients=None):
        """runtime_table(): GET_BROKER_RUNTIME_INFO's table (read once per scrape: see _table)."""
        self.config = config
        self.controller = controller
        self.runtime_table = runtime_table
        self.offsets = offsets
        self.clients = clients
        self._cached = (None, None)

    # -- sources ------------------------------------------------------------------------------------
    def _table(self) -> dict[str, str]:
        # The gauges of one scrape read one table (they are called one after another in a reactor turn).
        now = self.controller.clock.seconds()
        at, table = self._cached
        if at is None or not 0 <= now - at < 1.0:
            table = self.runtime_table()
            self._cached = (now, table)
        return table

    def _runtime_labels(self, table) -> dict:
        return {
            "cluster": self.config.brokerClusterName,
            "brokerIP": self.config.broker_addr,
            "brokerHost": "",
            "des": table.get("brokerVersionDesc", ""),
            "boottime": table.get("bootTimestamp", ""),
            "broker_version": str(BROKER_VERSION),
        }

    def _runtime_value(self, key: str):
        table = self._table()
        try:
            value = float(table[key])
        except (KeyError, ValueError):
            return []
        return [(self._runtime_labels(table), value)]

    def _tps(self, series: str, seconds: int):
        value = self.controller.stats.store.tps(series, seconds)
        return [(self._runtime_labels(self._table()), value if value is not None else 0.0)]

    def _total_tps(self, seconds: int):
        store = self.controller.stats.store
        total = (store.tps("found", seconds) or 0.0) + (store.tps("miss", seconds) or 0.0)
        return [(self._runtime_labels(self._table()), total)]

    def _pmdt(self, i: int):
        last = self.controller.stats.store.last_distribution
        return [(self._runtime_labels(self._table()), last[i] if last is not None else 0)]

    def _capacity(self, which: str):
        import os

        try:
            s = os.statvfs(self.config.storePathRootDir)
        except OSError:
            return []
        n = s.f_blocks * s.f_frsize if which == "total" else s.f_bavail * s.f_frsize
        return [(self._runtime_labels(self._table()), n)]

    def _stats_rows(self, name: str, labels_of, value_of):
        rows = []
        for key, item in sorted(self.controller.stats.table.sets[name].items()):
            labels = labels_of(key)
            if labels is not None:
                rows.append((labels, value_of(item.window("minute"))))
        return rows

    def _broker_nums(self, name: str):
        c = self.config
        item = self.controller.stats.table.item(name, c.brokerClusterName)
        tps = item.window("minute")["tps"] if item is not None else 0.0
        return [({"cluster": c.brokerClusterName, "brokerIP": c.broker_addr, "broker": c.brokerName}, round(tps, 2))]

    def _topic_labels(self, topic: str) -> dict:
        return {"cluster": self.config.brokerClusterName, "broker": self.config.brokerName, "topic": topic}

    def _group_labels(self, key: str) -> dict | None:
        topic, sep, group = key.rpartition("@")
        if not sep:
            return None
        return {**self._topic_labels(topic), "group": group}

    def _commitlog_diff(self):
        c, ha = self.config, self.controller.ha
        if ha is None:
            return []
        top = self.controller.store.max_offset
        return [
            (
                {"cluster": c.brokerClusterName, "brokerIP": conn.peer, "broker": c.brokerName},
                top - max(conn.session.slave_ack_offset, 0),
            )
            for conn in ha._reported()
        ]

    def _group_diff(self, retry: bool):
        if self.offsets is None:
            return []
        store = self.controller.store
        rows = []
        for key, queues in sorted(self.offsets.table.items()):
            topic, sep, group = key.rpartition("@")
            if not sep or topic.startswith(DLQ_PREFIX) or topic.startswith(RETRY_PREFIX) != retry:
                continue
            info = self.clients.consumer_groups.get(group) if self.clients is not None else None
            if info is not None and info.message_model == "BROADCASTING":
                continue  # the exporter reports clustering groups only
            online = len(info.channels) if info is not None else 0
            diff = sum(max(0, store.max_queue_offset(topic, q) - o) for q, o in queues.items())
            rows.append(
                ({"group": group, "topic": topic, "countOfOnlineConsumers": str(online), "msgModel": CLUSTERING}, diff)
            )
        return rows

    # -- registration -------------------------------------------------------------------------------
    def install(self, reg) -> None:
        self._install_runtime_info(reg)
        self._install_broker(reg)
        self._install_topics_and_groups(reg)

    def _install_runtime_info(self, reg) -> None:
        """GET_BROKER_RUNTIME_INFO's values: the plain ones, the TPS windows and the put-time distribution."""
        for name, key in RUNTIME_GAUGES.items():
            reg.gauge(
                f"brokeruntime_{name}",
                f"GET_BROKER_RUNTIME_INFO {key} (rocketmq-exporter name)",
                lambda key=key: self._runtime_value(key),
            )
        for name, series in TPS_GAUGES.items():
            for seconds in st.TPS_WINDOWS_S:
                reg.gauge(
                    f"brokeruntime_{name}{seconds}",
                    f"{series} per second over {seconds} s (rocketmq-exporter name)",
                    lambda series=series, seconds=seconds: self._tps(series, seconds),
                )
        for seconds in st.TPS_WINDOWS_S:
            reg.gauge(
                f"brokeruntime_gettotal_tps{seconds}",
                f"found + missed reads per second over {seconds} s (rocketmq-exporter name)",
                lambda seconds=seconds: self._total_tps(seconds),
            )
        for i, name in enumerate(PMDT_NAMES):
            reg.gauge(
                f"brokeruntime_pmdt_{name}",
                f"puts of the last full minute that took {name} (putMessageDistributeTime; rocketmq-exporter name)",
                lambda i=i: self._pmdt(i),
            )

    def _install_broker(self, reg) -> None:
        """The store's disk, flush backlog, the broker's put and pull rates and the slaves' replication lag."""
        reg.gauge(
            "brokeruntime_commitlogdir_capacity_total",
            "bytes of the store's file system (rocketmq-exporter name)",
            lambda: self._capacity("total"),
        )
        reg.gauge(
            "brokeruntime_commitlogdir_capacity_free",
            "bytes free for the broker on the store's file system (rocketmq-exporter name)",
            lambda: self._capacity("free"),
        )
        reg.gauge(
            "brokeruntime_remain_howmanydata_toflush",
            "commit-log bytes not yet confirmed on disk (rocketmq-exporter name)",
            self._to_flush,
        )
        reg.gauge(
            "broker_tps",
            "messages put per second over the last minute (BROKER_PUT_NUMS; rocketmq-exporter name)",
            lambda: self._broker_nums(st.BROKER_PUT_NUMS),
        )
        reg.gauge(
            "broker_qps",
            "messages pulled per second over the last minute (BROKER_GET_NUMS; rocketmq-exporter name)",
            lambda: self._broker_nums(st.BROKER_GET_NUMS),
        )
        reg.gauge(
            "broker_commitlog_diff",
            "master max offset minus each slave's acknowledged offset, by the "
            "slave's HA connection (rocketmq-exporter name)",
            self._commitlog_diff,
        )

    def _install_topics_and_groups(self, reg) -> None:
        """Rates by topic and group, and each group's backlog (with its retry topic's)."""
        per_topic = lambda name, field: lambda: self._stats_rows(name, self._topic_labels, lambda w: round(w[field], 2))
        per_group = lambda name, field: lambda: self._stats_rows(name, self._group_labels, lambda w: round(w[field], 2))
        reg.gauge(
            "producer_tps",
            "messages put per second over the last minute, by topic (TOPIC_PUT_NUMS; rocketmq-exporter name)",
            per_topic(st.TOPIC_PUT_NUMS, "tps"),
        )
        reg.gauge(
            "producer_message_size",
            "bytes put per second over the last minute, by topic (TOPIC_PUT_SIZE; rocketmq-exporter name)",
            per_topic(st.TOPIC_PUT_SIZE, "tps"),
        )
        reg.gauge(
            "consumer_tps",
            "messages pulled per second over the last minute, by topic and group "
            "(GROUP_GET_NUMS; rocketmq-exporter name)",
            per_group(st.GROUP_GET_NUMS, "tps"),
        )
        reg.gauge(
            "consumer_message_size",
            "bytes pulled per second over the last minute, by topic and group (GROUP_GET_SIZE; rocketmq-exporter name)",
            per_group(st.GROUP_GET_SIZE, "tps"),
        )
        reg.gauge(
            "send_back_nums",
            "messages sent back in the last minute, by topic and group (SNDBCK_PUT_NUMS; rocketmq-exporter name)",
            per_group(st.SNDBCK_PUT_NUMS, "sum"),
        )
        reg.gauge(
            "group_diff",
            "messages not yet consumed in this broker's queues, by group and topic (rocketmq-exporter name)",
            lambda: self._group_diff(retry=False),
        )
        reg.gauge(
            "group_retrydiff",
            "the same for the groups' retry topics (rocketmq-exporter name)",
            lambda: self._group_diff(retry=True),
        )

    def _to_flush(self):
        flusher, store = self.controller.flusher, self.controller.store
        durable = flusher.durable_offset if flusher is not None else store.max_offset
        return [(self._runtime_labels(self._table()), max(0, store.max_offset - durable))]
