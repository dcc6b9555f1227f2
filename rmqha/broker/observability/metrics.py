"""Metrics in Prometheus text format, and the HTTP endpoint that serves them (/metrics, /status).

Gauges are read from callbacks at scrape time, so there is no bookkeeping on the hot path; counters
and histograms are plain in-process numbers.
"""

from __future__ import annotations

import bisect
import json

from twisted.web import resource, server


def _fmt_labels(labels: dict) -> str:
    if not labels:
        return ""
    parts = []
    for k, v in labels.items():
        v = str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
        parts.append(f'{k}="{v}"')
    return "{" + ",".join(parts) + "}"


def _fmt_value(v) -> str:
    if isinstance(v, float):
        return repr(v) if v == v else "NaN"
    return str(int(v))


class Counter:
    def __init__(self, name, help_):
        self.name, self.help = name, help_
        self.values: dict[tuple, float] = {}

    def inc(self, amount: float = 1, **labels) -> None:
        key = tuple(sorted(labels.items()))
        self.values[key] = self.values.get(key, 0) + amount

    def get(self, **labels) -> float:
        return self.values.get(tuple(sorted(labels.items())), 0)

    def render(self):
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} counter"
        for key, v in sorted(self.values.items()):
            yield f"{self.name}{_fmt_labels(dict(key))} {_fmt_value(v)}"


class Gauge:
    """fn() returns a number, or a list of (labels dict, number)."""

    def __init__(self, name, help_, fn):
        self.name, self.help, self.fn = name, help_, fn

    def render(self):
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} gauge"
        v = self.fn()
        rows = v if isinstance(v, list) else [({}, v)]
        for labels, value in rows:
            yield f"{self.name}{_fmt_labels(labels)} {_fmt_value(value)}"


class Histogram:
    def __init__(self, name, help_, buckets):
        self.name, self.help = name, help_
        self.buckets = sorted(buckets)
        self.series: dict[tuple, list] = {}  # labels -> [bucket counts..., sum, count]

    def observe(self, value: float, **labels) -> None:
        key = tuple(sorted(labels.items()))
        s = self.series.get(key)
        if s is None:
            s = self.series[key] = [0] * len(self.buckets) + [0.0, 0]
        i = bisect.bisect_left(self.buckets, value)
        if i < len(self.buckets):
            s[i] += 1
        s[-2] += value
        s[-1] += 1

    def count(self, **labels) -> int:
        s = self.series.get(tuple(sorted(labels.items())))
        return s[-1] if s else 0

    def render(self):
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} histogram"
        for key, s in sorted(self.series.items()):
            labels = dict(key)
            acc = 0
            for b, c in zip(self.buckets, s):
                acc += c
                yield f"{self.name}_bucket{_fmt_labels({**labels, 'le': repr(float(b))})} {acc}"
            yield f"{self.name}_bucket{_fmt_labels({**labels, 'le': '+Inf'})} {s[-1]}"
            yield f"{self.name}_sum{_fmt_labels(labels)} {repr(float(s[-2]))}"
            yield f"{self.name}_count{_fmt_labels(labels)} {s[-1]}"


class Registry:
    def __init__(self, prefix: str = "rocketmq_"):
        self.prefix = prefix
        self.metrics: dict[str, object] = {}

    def _add(self, m):
        if m.name in self.metrics:
            raise ValueError(f"metric {m.name} registered twice")
        self.metrics[m.name] = m
        return m

    def counter(self, name, help_) -> Counter:
        return self._add(Counter(self.prefix + name, help_))

    def gauge(self, name, help_, fn) -> Gauge:
        return self._add(Gauge(self.prefix + name, help_, fn))

    def histogram(self, name, help_, buckets) -> Histogram:
        return self._add(Histogram(self.prefix + name, help_, buckets))

    def render(self) -> str:
        lines = []
        for m in self.metrics.values():
            lines.extend(m.render())
        return "\n".join(lines) + "\n"


class _Text(resource.Resource):
    isLeaf = True

    def __init__(self, fn, content_type):
        super().__init__()
        self.fn, self.content_type = fn, content_type

    def render_GET(self, request):
        request.setHeader(b"content-type", self.content_type)
        return self.fn().encode("utf-8")


class _Served(resource.Resource):
    """GET /served?after=N&limit=M: the pulls answered since entry N (rmqha/broker/observability/served.py)."""

    isLeaf = True

    def __init__(self, served):
        super().__init__()
        self.served = served

    def render_GET(self, request):
        request.setHeader(b"content-type", b"application/json")
        try:
            after = int((request.args.get(b"after") or [b"0"])[0])
            limit = int((request.args.get(b"limit") or [b"10000"])[0])
        except ValueError:
            request.setResponseCode(400)
            return b'{"error": "after and limit must be integers"}'
        return json.dumps(self.served.since(after, min(max(limit, 0), 100000))).encode("utf-8")


def metrics_site(registry: Registry, status_fn, served=None) -> server.Site:
    root = resource.Resource()
    if served is not None:
        root.putChild(b"served", _Served(served))
    root.putChild(b"metrics", _Text(registry.render, b"text/plain; version=0.0.4; charset=utf-8"))
    root.putChild(b"status", _Text(lambda: json.dumps(status_fn(), indent=1, sort_keys=True), b"application/json"))
    site = server.Site(root)
    site.noisy = False
    site.log = lambda request: None  # scrapes are not news
    return site
