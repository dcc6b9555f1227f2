"""The broker's statistics as RocketMQ 4.9 keeps them, free of I/O: every method takes `now_ms`.

* `StatsTable`: 4.9's BrokerStatsManager. Counters by stats name and key (TOPIC_PUT_NUMS by topic,
  GROUP_GET_NUMS by "topic@group", BROKER_PUT_NUMS by cluster name...), each sampled every 10 s,
  10 min and 1 h into the minute, hour and day windows VIEW_BROKER_STATS_DATA reports.
* `StoreStats`: 4.9's StoreStatsService. Store-wide put and get counts sampled every second (put and
  get TPS over 10 s, 1 min and 10 min), put latency buckets, yesterday's and today's morning totals:
  the store part of GET_BROKER_RUNTIME_INFO, with 4.9's value formats.

`StatsClock.tick(now_ms)` runs every sampling that is due; rmqha.broker.observability.stats_service drives it once a second.
"""

from __future__ import annotations

import bisect
import datetime
import decimal
import math
from collections import deque

# -- BrokerStatsManager -------------------------------------------------------------------------------
TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
SNDBCK_PUT_NUMS = "SNDBCK_PUT_NUMS"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"
STATS_NAMES = (
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    SNDBCK_PUT_NUMS,
    BROKER_PUT_NUMS,
    BROKER_GET_NUMS,
)

# Keys come from peers (topic and group names): a bound on what they can make the broker hold. Names are
# validated before they get here; past the bound new keys are not counted (existing ones still are).
MAX_KEYS_PER_STATS = 20000

MINUTE_STEP_MS, MINUTE_KEEP = 10_000, 7  # 6 intervals of 10 s: the last minute
HOUR_STEP_MS, HOUR_KEEP = 600_000, 7  # 6 intervals of 10 min: the last hour
DAY_STEP_MS, DAY_KEEP = 3_600_000, 25  # 24 intervals of 1 h: the last day


class StatsItem:
    """One counter (a sum and how many additions made it) and its three windows of snapshots."""

    __slots__ = ("value", "times", "windows")

    def __init__(self):
        self.value = 0
        self.times = 0
        # window -> deque of (timestamp ms, times, value)
        self.windows = {
            "minute": deque(maxlen=MINUTE_KEEP),
            "hour": deque(maxlen=HOUR_KEEP),
            "day": deque(maxlen=DAY_KEEP),
        }

    def add(self, value: int, times: int = 1) -> None:
        self.value += value
        self.times += times

    def sample(self, window: str, now_ms: int, step_ms: int) -> None:
        snaps = self.windows[window]
        if not snaps:  # as 4.9: the first sample is paired with a zero one step earlier
            snaps.append((now_ms - step_ms, 0, 0))
        snaps.append((now_ms, self.times, self.value))

    def window(self, window: str) -> dict:
        """4.9's BrokerStatsItem of one window: {"sum", "tps", "avgpt"} (avgpt: value per addition)."""
        snaps = self.windows[window]
        if len(snaps) < 2:
            return {"sum": 0, "tps": 0.0, "avgpt": 0.0}
        (t0, n0, v0), (t1, n1, v1) = snaps[0], snaps[-1]
        total = v1 - v0
        tps = total * 1000.0 / (t1 - t0) if t1 > t0 else 0.0
        times = n1 - n0
        return {"sum": total, "tps": tps, "avgpt": total / times if times > 0 else 0.0}


class StatsTable:
    """BrokerStatsManager: stats name -> key -> StatsItem."""

    def __init__(self, cluster_name: str):
        self.cluster_name = cluster_name
        self.sets: dict[str, dict[str, StatsItem]] = {name: {} for name in STATS_NAMES}
        self.dropped = 0  # additions not counted: MAX_KEYS_PER_STATS keys were held

    def add(self, name: str, key: str, value: int, times: int = 1) -> None:
        items = self.sets[name]
        item = items.get(key)
        if item is None:
            if len(items) >= MAX_KEYS_PER_STATS:
                self.dropped += 1
                return
            item = items[key] = StatsItem()
        item.add(value, times)

    def item(self, name: str, key: str) -> StatsItem | None:
        items = self.sets.get(name)
        return items.get(key) if items is not None else None

    # -- what the processors count (4.9's inc* methods, same keys) ------------------------------------
    def on_put(self, topic: str, msgs: int, wrote_bytes: int, requests: int = 1) -> None:
        """Sends stored (SendMessageProcessor: one addition per request, of its messages and bytes;
        `requests` sends to one topic at once are counted together)."""
        self.add(TOPIC_PUT_NUMS, topic, msgs, requests)
        self.add(TOPIC_PUT_SIZE, topic, wrote_bytes, requests)
        self.add(BROKER_PUT_NUMS, self.cluster_name, msgs, 0)

    def on_get(self, group: str, topic: str, msgs: int, size: int) -> None:
        """A pull answered with messages (PullMessageProcessor)."""
        key = f"{topic}@{group}"
        self.add(GROUP_GET_NUMS, key, msgs, 1)
        self.add(GROUP_GET_SIZE, key, size, 1)
        self.add(BROKER_GET_NUMS, self.cluster_name, msgs, 0)

    def on_send_back(self, group: str, topic: str) -> None:
        self.add(SNDBCK_PUT_NUMS, f"{topic}@{group}", 1, 1)

    def sample(self, window: str, now_ms: int, step_ms: int) -> None:
        for items in self.sets.values():
            for item in items.values():
                item.sample(window, now_ms, step_ms)


# -- StoreStatsService ----------------------------------------------------------------------------------
SAMPLE_STEP_MS = 1000
MAX_SAMPLES = 600 + 1  # ten minutes of one-second samples, and the one before
TPS_WINDOWS_S = (10, 60, 600)
DISTRIBUTION_PERIOD_MS = 60_000  # 4.9 reports the put-latency distribution of the last full minute
# putMessageDistributeTime: 4.9's buckets (<= 0 ms, then below each bound in ms, then the rest).
DISTRIBUTION_BOUNDS = (10, 50, 100, 200, 500, 1000, 2000, 3000, 4000, 5000, 10000)
DISTRIBUTION_LABELS = (
    "[<=0ms]",
    "[0~10ms]",
    "[10~50ms]",
    "[50~100ms]",
    "[100~200ms]",
    "[200~500ms]",
    "[500ms~1s]",
    "[1~2s]",
    "[2~3s]",
    "[3~4s]",
    "[4~5s]",
    "[5~10s]",
    "[10s~]",
)
# The finer buckets of putLatency99/999 (4.9: steps of 1 ms to 20, 2 to 50, 5 to 100, 10 to 200, 50 to
# 500, 100 to 1000, 1000 to 10000, then the rest).
_PX_BOUNDS: list[int] = []
for _step, _n in ((1, 20), (2, 15), (5, 10), (10, 10), (50, 6), (100, 5), (1000, 9)):
    for _ in range(_n):
        _PX_BOUNDS.append((_PX_BOUNDS[-1] if _PX_BOUNDS else 0) + _step)


class StoreStats:
    """Store-wide put and get counters and their samples (4.9's StoreStatsService)."""

    def __init__(self, boot_ms: int):
        self.boot_ms = boot_ms
        self.put_times: dict[str, int] = {}  # topic -> messages put
        self.put_sizes: dict[str, int] = {}  # topic -> bytes put
        self.put_times_total = 0
        self.put_size_total = 0
        self.put_failed = 0
        self.get_found = 0
        self.get_miss = 0
        self.get_transferred = 0
        self.put_time_max = 0
        self.get_time_max = 0
        self.dispatch_max_buffer = 0
        self.samples = {k: deque(maxlen=MAX_SAMPLES) for k in ("put", "found", "miss", "transferred")}
        self.distribution = [0] * len(DISTRIBUTION_LABELS)
        self.last_distribution: list[int] | None = None
        self.px = [0] * (len(_PX_BOUNDS) + 1)
        self.last_px = [0] * (len(_PX_BOUNDS) + 1)
        # BrokerStats: the totals at the last two midnights
        self.put_yesterday_morning = self.put_today_morning = 0
        self.get_yesterday_morning = self.get_today_morning = 0

    # -- counting ------------------------------------------------------------------------------------
    def on_put(self, topic: str, msgs: int, size: int, elapsed_ms: int, puts: int = 1) -> None:
        """Messages appended to the commit log by `puts` puts (a batch is one put), each of which took
        elapsed_ms."""
        self.put_times[topic] = self.put_times.get(topic, 0) + msgs
        self.put_sizes[topic] = self.put_sizes.get(topic, 0) + size
        self.put_times_total += msgs
        self.put_size_total += size
        self.distribution[1 + bisect.bisect_right(DISTRIBUTION_BOUNDS, elapsed_ms) if elapsed_ms > 0 else 0] += puts
        self.px[bisect.bisect_left(_PX_BOUNDS, elapsed_ms)] += puts
        if elapsed_ms > self.put_time_max:
            self.put_time_max = elapsed_ms

    def on_put_failed(self) -> None:
        self.put_failed += 1

    def on_get(self, found: int, elapsed_ms: int = 0) -> None:
        """A read of a queue: `found` messages returned (0: a miss)."""
        if found:
            self.get_found += 1
            self.get_transferred += found
        else:
            self.get_miss += 1
        if elapsed_ms > self.get_time_max:
            self.get_time_max = elapsed_ms

    def forget_topic(self, topic: str) -> None:
        self.put_times.pop(topic, None)
        self.put_sizes.pop(topic, None)

    # -- sampling ------------------------------------------------------------------------------------
    def sample(self, now_ms: int) -> None:
        for key, total in (
            ("put", self.put_times_total),
            ("found", self.get_found),
            ("miss", self.get_miss),
            ("transferred", self.get_transferred),
        ):
            self.samples[key].append((now_ms, total))

    def roll_distribution(self) -> None:
        """End of a minute: the minute's latency counts become the reported ones."""
        self.last_distribution = self.distribution
        self.distribution = [0] * len(DISTRIBUTION_LABELS)
        self.last_px, self.px = self.px, [0] * (len(_PX_BOUNDS) + 1)

    def record_morning(self) -> None:
        """Midnight (4.9's BrokerStats.record)."""
        self.put_yesterday_morning, self.put_today_morning = self.put_today_morning, self.put_times_total
        self.get_yesterday_morning, self.get_today_morning = self.get_today_morning, self.get_transferred

    # -- reading -------------------------------------------------------------------------------------
    def tps(self, key: str, seconds: int) -> float | None:
        """Per second over the last `seconds` samples; None until there are that many."""
        snaps = self.samples[key]
        if len(snaps) <= seconds:
            return None
        (t0, v0), (t1, v1) = snaps[-1 - seconds], snaps[-1]
        return (v1 - v0) * 1000.0 / (t1 - t0) if t1 > t0 else 0.0

    def tps_text(self, key: str) -> str:
        """4.9's "<10 s> <1 min> <10 min>": a window without enough samples yet is empty."""
        return " ".join("" if v is None else java_double(v) for v in (self.tps(key, s) for s in TPS_WINDOWS_S))

    def total_tps_text(self) -> str:
        return " ".join(
            java_double((self.tps("found", s) or 0.0) + (self.tps("miss", s) or 0.0)) for s in TPS_WINDOWS_S
        )

    def latency_px(self, px: float) -> float:
        """4.9's findPutMessageEntireTimePX over the last full minute: interpolated within a bucket."""
        counts = self.last_px
        index = int(sum(counts) * px)
        passed = 0
        bounds = _PX_BOUNDS + [2**63 - 1]
        for i, n in enumerate(counts):
            if index <= passed + n:
                rel = index - passed
                low = bounds[i - 1] if i else 0
                return low + ((bounds[i] - low) * rel / n if n else 0)
            passed += n
        return 0.0

    def distribution_text(self) -> str:
        if self.last_distribution is None:
            return "null"  # String.valueOf(null): no full minute yet
        return "".join(f"{label}:{n} " for label, n in zip(DISTRIBUTION_LABELS, self.last_distribution))

    def runtime_info(self, now_ms: int) -> dict[str, str]:
        """StoreStatsService.getRuntimeInfo plus BrokerStats' totals, every value a string as 4.9 writes it."""
        total = self.put_times_total or 1  # 4.9 reports at least 1, and divides by it
        return {
            "bootTimestamp": str(self.boot_ms),
            "runtime": format_runtime(now_ms - self.boot_ms),
            "putMessageEntireTimeMax": str(self.put_time_max),
            "putMessageTimesTotal": str(total),
            "putMessageFailedTimes": str(self.put_failed),
            "putMessageSizeTotal": str(self.put_size_total),
            "putMessageDistributeTime": self.distribution_text(),
            "putMessageAverageSize": java_double(self.put_size_total / total),
            "dispatchMaxBuffer": str(self.dispatch_max_buffer),
            "getMessageEntireTimeMax": str(self.get_time_max),
            "putTps": self.tps_text("put"),
            "getFoundTps": self.tps_text("found"),
            "getMissTps": self.tps_text("miss"),
            "getTotalTps": self.total_tps_text(),
            "getTransferedTps": self.tps_text("transferred"),
            "putLatency99": f"{self.latency_px(0.99):.2f}",
            "putLatency999": f"{self.latency_px(0.999):.2f}",
            "msgPutTotalYesterdayMorning": str(self.put_yesterday_morning),
            "msgPutTotalTodayMorning": str(self.put_today_morning),
            "msgPutTotalTodayNow": str(self.put_times_total),
            "msgGetTotalYesterdayMorning": str(self.get_yesterday_morning),
            "msgGetTotalTodayMorning": str(self.get_today_morning),
            "msgGetTotalTodayNow": str(self.get_transferred),
        }


# -- the schedule of samplings ---------------------------------------------------------------------------
class StatsClock:
    """Which samplings are due at `now_ms`: every second the store's, every 10 s / 10 min / 1 h the
    table's windows, every minute the latency distribution, at local midnight the morning totals."""

    def __init__(self, table: StatsTable, store: StoreStats, now_ms: int, tz=None):
        self.table, self.store, self.tz = table, store, tz
        self.due = {
            "second": now_ms,
            "minute": now_ms,
            "hour": now_ms,
            "day": now_ms,
            "distribution": now_ms + DISTRIBUTION_PERIOD_MS,
            "midnight": self._next_midnight(now_ms),
        }

    def _next_midnight(self, now_ms: int) -> int:
        now = datetime.datetime.fromtimestamp(now_ms / 1000.0, tz=self.tz)
        midnight = (now + datetime.timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
        return int(midnight.timestamp() * 1000)

    def tick(self, now_ms: int) -> None:
        due = self.due
        if now_ms >= due["second"]:
            self.store.sample(now_ms)
            due["second"] = _next(due["second"], SAMPLE_STEP_MS, now_ms)
        for window, step in (("minute", MINUTE_STEP_MS), ("hour", HOUR_STEP_MS), ("day", DAY_STEP_MS)):
            if now_ms >= due[window]:
                self.table.sample(window, now_ms, step)
                due[window] = _next(due[window], step, now_ms)
        if now_ms >= due["distribution"]:
            self.store.roll_distribution()
            due["distribution"] = _next(due["distribution"], DISTRIBUTION_PERIOD_MS, now_ms)
        if now_ms >= due["midnight"]:
            self.store.record_morning()
            due["midnight"] = self._next_midnight(now_ms)


def _next(due: int, step: int, now_ms: int) -> int:
    """The next due time after now (a stalled reactor skips the missed ones rather than bursting)."""
    due += step
    return due if due > now_ms else now_ms + step


# -- Java's formats ---------------------------------------------------------------------------------------
def format_runtime(elapsed_ms: int) -> str:
    """StoreStatsService.getFormatRuntime: "[ 0 days, 1 hours, 2 minutes, 3 seconds ]"."""
    elapsed_ms = max(0, elapsed_ms)
    days, rest = divmod(elapsed_ms, 86_400_000)
    hours, rest = divmod(rest, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    return f"[ {days} days, {hours} hours, {minutes} minutes, {rest // 1000} seconds ]"


def java_double(x: float) -> str:
    """Java's Double.toString: "0.0", "12.5", and scientific notation below 1e-3 or from 1e7 on
    ("1.0E7", "1.5E-4")."""
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1, x) < 0 else "0.0"
    a = abs(x)
    if 1e-3 <= a < 1e7:
        text = repr(x)
        return text if "." in text else text + ".0"
    # The shortest digits that read back as x (repr's, as Java's), as d.ddd x 10^exp.
    sign, digits, exponent = decimal.Decimal(repr(x)).normalize().as_tuple()
    text = "".join(map(str, digits))
    exp = exponent + len(text) - 1
    mantissa = text[0] + "." + (text[1:] or "0")
    return f"{'-' if sign else ''}{mantissa}E{exp}"


def human_bytes(n: int) -> str:
    """MixAll.humanReadableByteCount(bytes, si=false): "512 B", "1.5 KiB", "3.2 GiB"."""
    if n < 1024:
        return f"{n} B"
    exp = min(int(math.log(n) / math.log(1024)), 6)
    return f"{n / 1024**exp:.1f} {'KMGTPE'[exp - 1]}iB"
