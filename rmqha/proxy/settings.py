"""The settings a client gets back on its Telemetry stream (GrpcClientSettingsManager in rocketmq-proxy
5.x; tests: tests/unit/test_proxy_convert.py). The client's own settings are kept and the server's
part merged over them: a producer's backoff (3 attempts, 10 ms doubling to 1 s) and publishing limits;
a consumer's batch size, long-polling timeout, FIFO flag and retry policy from its subscription group
(max attempts = retryMaxTimes + 1, the customized backoff of the delay levels)."""

from __future__ import annotations

from google.protobuf import duration_pb2

from rmqha.proxy.third_party.rocketmq_apis.v2 import definition_pb2 as d

PRODUCER_MAX_ATTEMPTS = 3
MAX_MESSAGE_SIZE = 4 * 1024 * 1024
LONG_POLLING_BATCH = 32
MAX_LONG_POLLING_MS = 20_000
MIN_LONG_POLLING_MS = 5_000
# CustomizedRetryPolicy's default: the retry delays of levels 3..18
DEFAULT_RETRY_NEXT_MS = tuple(
    s * 1000 for s in (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
)
DEFAULT_RETRY_MAX_TIMES = 16


def _ms(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def producer(client: d.Settings) -> d.Settings:
    out = d.Settings()
    out.CopyFrom(client)
    out.backoff_policy.max_attempts = PRODUCER_MAX_ATTEMPTS
    out.backoff_policy.exponential_backoff.CopyFrom(
        d.ExponentialBackoff(initial=_ms(10), max=_ms(1000), multiplier=2.0)
    )
    out.publishing.validate_message_type = True
    out.publishing.max_body_size = MAX_MESSAGE_SIZE
    out.metric.on = False
    return out


def consumer(client: d.Settings, retry_max_times: int = DEFAULT_RETRY_MAX_TIMES, orderly: bool = False) -> d.Settings:
    out = d.Settings()
    out.CopyFrom(client)
    out.subscription.receive_batch_size = LONG_POLLING_BATCH
    out.subscription.long_polling_timeout.CopyFrom(_ms(MAX_LONG_POLLING_MS))
    out.subscription.fifo = orderly
    out.backoff_policy.max_attempts = retry_max_times + 1
    out.backoff_policy.customized_backoff.CopyFrom(d.CustomizedBackoff(next=[_ms(m) for m in DEFAULT_RETRY_NEXT_MS]))
    out.metric.on = False
    return out


def group_of(client: d.Settings) -> str | None:
    if client.WhichOneof("pub_sub") == "subscription" and client.subscription.HasField("group"):
        return client.subscription.group.name
    return None
