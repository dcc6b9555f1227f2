"""Toxiproxy control for a cluster's links, over toxiproxy-python.

    tox = Toxics("http://127.0.0.1:8474")
    with tox.toxic("broker-a-s-ha", "latency", latency=3000):       # master -> slave delayed 3 s
        ...
    tox.cut("broker-a-s-ha", "reset_peer")                          # or "timeout" / "disabled"
    tox.restore("broker-a-s-ha")                                    # toxics removed, proxy enabled

Proxy names (docker backend, see rmqha/cluster/docker_backend.py): `<node>` is the client port of a broker
(host 127.0.0.1:P -> broker), `<slave>-ha` the HA link of a slave (slave -> master's HA port).
Streams are Toxiproxy's: on an HA proxy "downstream" is master -> slave (commit-log data,
heartbeats), "upstream" slave -> master (offset reports).

toxiproxy-python keeps its server address in a class attribute (one server per process); every call
here points it at this object's server first, so several clusters can be driven from one process
(not from several threads at once).
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from urllib.parse import urlparse

from toxiproxy import Toxiproxy
from toxiproxy.exceptions import NotFound

STREAMS = ("downstream", "upstream")
CUT_MODES = ("reset_peer", "timeout", "disabled")


class ToxicsError(Exception):
    pass


class Toxics:
    def __init__(self, api: str):
        u = urlparse(api if "://" in api else f"http://{api}")
        self.api = f"http://{u.hostname}:{u.port or 8474}"
        self.host, self.port = u.hostname, u.port or 8474
        self._server = Toxiproxy()

    # -- toxiproxy-python objects -----------------------------------------------------------------
    @property
    def server(self) -> Toxiproxy:
        self._server.update_api_consumer(self.host, self.port)
        return self._server

    def proxy(self, name: str):
        p = self.server.get_proxy(name)
        if p is None:
            raise ToxicsError(f"no proxy {name!r} on {self.api}; proxies: {', '.join(sorted(self.server.proxies()))}")
        return p

    # -- reading ----------------------------------------------------------------------------------
    def get(self, name: str) -> dict:
        """The proxy as the server reports it: {"name","listen","upstream","enabled","toxics":[...]}."""
        try:
            with urllib.request.urlopen(f"{self.api}/proxies/{name}", timeout=5) as r:
                return json.loads(r.read().decode())
        except urllib.error.HTTPError as e:
            raise ToxicsError(f"GET {self.api}/proxies/{name}: HTTP {e.code}") from e

    def names(self) -> list[str]:
        return sorted(self.server.proxies())

    def toxic_names(self, name: str) -> list[str]:
        return [t["name"] for t in self.get(name).get("toxics") or []]

    # -- toxics -----------------------------------------------------------------------------------
    def add(
        self,
        proxy: str,
        type: str,
        stream: str = "downstream",
        name: str | None = None,
        toxicity: float = 1.0,
        **attributes,
    ) -> str:
        """Add a toxic; returns its name (default `<type>_<stream>`)."""
        if stream not in STREAMS:
            raise ToxicsError(f"stream must be one of {STREAMS}, got {stream!r}")
        name = name or f"{type}_{stream}"
        self.proxy(proxy).add_toxic(type=type, stream=stream, name=name, toxicity=toxicity, attributes=attributes)
        return name

    def remove(self, proxy: str, name: str) -> None:
        try:
            self.proxy(proxy).destroy_toxic(name)
        except NotFound:
            pass

    def clear(self, proxy: str) -> None:
        """Every toxic of the proxy removed."""
        p = self.proxy(proxy)
        for t in list(p.toxics()):
            try:
                p.destroy_toxic(t)
            except NotFound:
                pass

    @contextlib.contextmanager
    def toxic(self, proxy: str, type: str, **options):
        """The toxic add(proxy, type, **options) makes (its name yielded), removed when the block ends."""
        n = self.add(proxy, type, **options)
        try:
            yield n
        finally:
            self.remove(proxy, n)

    # shorthands (attributes as Toxiproxy names them: ms, KB/s, bytes)
    def latency(self, proxy: str, ms: int, jitter: int = 0, stream: str = "downstream") -> str:
        return self.add(proxy, "latency", stream, latency=ms, jitter=jitter)

    def bandwidth(self, proxy: str, rate_kb: int, stream: str = "downstream") -> str:
        return self.add(proxy, "bandwidth", stream, rate=rate_kb)

    def slicer(
        self, proxy: str, average_size: int, size_variation: int = 0, delay_us: int = 0, stream: str = "downstream"
    ) -> str:
        return self.add(
            proxy, "slicer", stream, average_size=average_size, size_variation=size_variation, delay=delay_us
        )

    # -- the whole link ---------------------------------------------------------------------------
    def disable(self, proxy: str) -> None:
        """Stop listening and close every connection of the proxy."""
        self.proxy(proxy).disable()

    def enable(self, proxy: str) -> None:
        self.proxy(proxy).enable()

    def cut(self, proxy: str, mode: str = "disabled") -> list[str]:
        """Break the link both ways. Returns the toxic names added (none for "disabled").

        reset_peer: each connection is reset (TCP RST) on its next data, new ones too;
        timeout:    data is swallowed both ways and connections stay open (peers time out on their own);
        disabled:   the proxy closes its connections and stops listening (connection refused).
        """
        if mode == "disabled":
            self.disable(proxy)
            return []
        if mode == "reset_peer":
            return [self.add(proxy, "reset_peer", s, name=f"cut_{s}", timeout=0) for s in STREAMS]
        if mode == "timeout":
            return [self.add(proxy, "timeout", s, name=f"cut_{s}", timeout=0) for s in STREAMS]
        raise ToxicsError(f"cut mode must be one of {CUT_MODES}, got {mode!r}")

    def restore(self, proxy: str) -> None:
        """The link as it was: every toxic removed, the proxy enabled."""
        self.clear(proxy)
        if not self.get(proxy).get("enabled"):
            self.enable(proxy)

    @contextlib.contextmanager
    def link_cut(self, proxy: str, mode: str = "disabled"):
        self.cut(proxy, mode)
        try:
            yield
        finally:
            self.restore(proxy)

    def reset(self) -> None:
        """Every proxy enabled, every toxic removed (Toxiproxy's POST /reset)."""
        self.server.reset()
