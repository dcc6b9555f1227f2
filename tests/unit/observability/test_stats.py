"""rmqha/broker/observability/stats.py: 4.9's BrokerStatsManager windows, StoreStatsService samples and Java's value formats."""

import datetime

import pytest

from rmqha.broker.observability import stats as st


def test_stats_item_windows_sum_tps_and_avgpt():
    item = st.StatsItem()
    assert item.window("minute") == {"sum": 0, "tps": 0.0, "avgpt": 0.0}  # never sampled
    item.sample("minute", 0, st.MINUTE_STEP_MS)  # first sample: paired with a zero one 10 s before
    assert list(item.windows["minute"]) == [(-10_000, 0, 0), (0, 0, 0)]
    item.add(30, 2)  # e.g. a batch of 30 messages in one send, then 10 in another... (times = additions)
    item.add(10, 1)
    item.sample("minute", 10_000, st.MINUTE_STEP_MS)
    # from the zero sample at -10 s to now: 40 over 20 s, 3 additions
    assert item.window("minute") == {"sum": 40, "tps": 2.0, "avgpt": pytest.approx(40 / 3)}
    for t in range(20_000, 90_000, 10_000):  # the window keeps 7 samples: the last minute only
        item.sample("minute", t, st.MINUTE_STEP_MS)
    assert len(item.windows["minute"]) == 7
    assert item.window("minute") == {"sum": 0, "tps": 0.0, "avgpt": 0.0}


def test_stats_table_keys_are_4_9s_and_bounded(monkeypatch):
    table = st.StatsTable("DefaultCluster")
    table.on_put("T", 3, 300)
    table.on_get("G", "T", 2, 150)
    table.on_send_back("G", "T")
    assert table.item(st.TOPIC_PUT_NUMS, "T").value == 3 and table.item(st.TOPIC_PUT_NUMS, "T").times == 1
    assert table.item(st.TOPIC_PUT_SIZE, "T").value == 300
    assert table.item(st.GROUP_GET_NUMS, "T@G").value == 2 and table.item(st.GROUP_GET_SIZE, "T@G").value == 150
    assert table.item(st.SNDBCK_PUT_NUMS, "T@G").value == 1
    assert table.item(st.BROKER_PUT_NUMS, "DefaultCluster").value == 3
    assert table.item(st.BROKER_GET_NUMS, "DefaultCluster").value == 2
    assert table.item(st.TOPIC_PUT_NUMS, "other") is None and table.item("NO_SUCH_STATS", "T") is None
    monkeypatch.setattr(st, "MAX_KEYS_PER_STATS", 2)
    table.on_put("T2", 1, 10)
    table.on_put("T3", 1, 10)  # a third key: not counted
    assert table.item(st.TOPIC_PUT_NUMS, "T3") is None and table.dropped == 2  # nums and size
    table.on_put("T", 1, 10)  # an existing key still counts
    assert table.item(st.TOPIC_PUT_NUMS, "T").value == 4


def test_store_tps_windows_need_their_samples():
    s = st.StoreStats(boot_ms=0)
    assert s.tps_text("put") == "  "  # 4.9: empty until a window has its samples
    for second in range(0, 12):
        s.on_put("T", 5, 500, 1)  # 5 messages a second
        s.sample(second * 1000)
    assert s.tps("put", 10) == 5.0 and s.tps("put", 60) is None
    assert s.tps_text("put") == "5.0  "
    assert s.tps_text("put").split(" ")[0] == "5.0"  # what mqadmin clusterList parses
    s.on_get(3)
    s.on_get(0)
    s.sample(12_000)
    assert s.tps("found", 10) == pytest.approx(0.1) and s.tps("miss", 10) == pytest.approx(0.1)
    assert s.total_tps_text() == "0.2 0.0 0.0"


def test_put_distribution_is_the_last_full_minute_in_4_9s_format():
    s = st.StoreStats(boot_ms=0)
    assert s.distribution_text() == "null"
    for ms in (0, 1, 9, 10, 49, 50, 999, 1000, 10_000, 99_999):
        s.on_put("T", 1, 100, ms)
    s.roll_distribution()
    assert s.distribution_text() == (
        "[<=0ms]:1 [0~10ms]:2 [10~50ms]:2 [50~100ms]:1 [100~200ms]:0 [200~500ms]:0 [500ms~1s]:1 [1~2s]:1 "
        "[2~3s]:0 [3~4s]:0 [4~5s]:0 [5~10s]:0 [10s~]:2 "
    )
    assert s.put_time_max == 99_999
    s.on_put("T", 1, 100, 7)  # the new minute is not reported until it is over
    assert s.distribution_text().startswith("[<=0ms]:1 [0~10ms]:2 ")


def test_put_latency_percentiles_interpolate_within_buckets():
    s = st.StoreStats(boot_ms=0)
    for _ in range(100):
        s.on_put("T", 1, 1, 3)  # all in the (2, 3] ms bucket
    s.roll_distribution()
    # index 99 of 100 in the bucket 2..3 ms: 2 + 1 * 99/100
    assert s.latency_px(0.99) == pytest.approx(2.99)
    assert s.runtime_info(1000)["putLatency99"] == "2.99"


def test_runtime_info_values_are_4_9s_strings():
    s = st.StoreStats(boot_ms=1_000)
    info = s.runtime_info(1_000 + 90_061_000)
    assert info["runtime"] == "[ 1 days, 1 hours, 1 minutes, 1 seconds ]"
    assert info["putMessageTimesTotal"] == "1"  # 4.9 reports at least 1 ...
    assert info["putMessageAverageSize"] == "0.0"  # ... and divides by it
    s.on_put("T", 2, 300, 0)
    s.on_put_failed()
    info = s.runtime_info(2_000)
    assert (
        info["putMessageTimesTotal"],
        info["putMessageSizeTotal"],
        info["putMessageAverageSize"],
        info["putMessageFailedTimes"],
        info["msgPutTotalTodayNow"],
    ) == ("2", "300", "150.0", "1", "2")


def test_clock_samples_on_schedule_and_records_mornings():
    utc = datetime.timezone.utc
    table, store = st.StatsTable("C"), st.StoreStats(0)
    start = int(datetime.datetime(2026, 1, 1, 23, 59, 0, tzinfo=utc).timestamp() * 1000)
    clock = st.StatsClock(table, store, start, tz=utc)
    table.on_put("T", 1, 10)
    store.on_put("T", 7, 70, 0)
    clock.tick(start)
    assert len(store.samples["put"]) == 1 and len(table.item(st.TOPIC_PUT_NUMS, "T").windows["minute"]) == 2
    clock.tick(start + 500)  # nothing due
    assert len(store.samples["put"]) == 1
    clock.tick(start + 1000)
    assert len(store.samples["put"]) == 2
    clock.tick(start + 60_000)  # midnight UTC: today's morning total becomes 7
    assert (store.put_today_morning, store.put_yesterday_morning) == (7, 0)
    assert store.runtime_info(start + 60_000)["msgPutTotalTodayMorning"] == "7"
    assert store.last_distribution is not None  # and a minute's distribution was rolled
    clock.tick(start + 60_000 + 86_400_000)
    assert (store.put_today_morning, store.put_yesterday_morning) == (7, 7)


@pytest.mark.parametrize(
    "x,text",
    [
        (0.0, "0.0"),
        (1.0, "1.0"),
        (12.5, "12.5"),
        (0.001, "0.001"),
        (0.0005, "5.0E-4"),
        (1e7, "1.0E7"),
        (123456789.0, "1.23456789E8"),
        (-2.5e8, "-2.5E8"),
        (9999999.0, "9999999.0"),
        (1 / 3, "0.3333333333333333"),
    ],
)
def test_java_double(x, text):
    assert st.java_double(x) == text


def test_human_bytes_is_mixall_humanreadablebytecount():
    assert [st.human_bytes(n) for n in (0, 1023, 1024, 1536, 3 * 1024**3)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "1.5 KiB",
        "3.0 GiB",
    ]
