"""Namespaced key/value settings kept by the name server (PUT/GET/DELETE_KV_CONFIG).

In memory only: Java persists them to kvConfig.json, which this reference cluster does not need.
The namespace ORDER_TOPIC_CONFIG holds "brokerName:queueNum;..." per ordered topic.
"""

from __future__ import annotations

from rmqha.broker.support.errors import BadRequest

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"

# ours: the table lives in memory and (without a cluster secret) any peer may write it; Java bounds it
# by nothing but the heap. The ORDER_TOPIC_CONFIG namespace goes into every REGISTER_BROKER reply, so the
# whole table must stay far below a frame (16 MiB): an anonymous flood once pushed those replies past it
# and every broker dropped off the name server. Counted in UTF-8 bytes, not characters.
MAX_KV_BYTES = 1024 * 1024
MAX_VALUE_BYTES = 64 * 1024
MAX_NAME_BYTES = 255  # a namespace or a key


class KVConfigManager:
    def __init__(self, max_bytes: int = MAX_KV_BYTES):
        self.table: dict[str, dict[str, str]] = {}
        self.max_bytes = max_bytes
        self.size = 0  # UTF-8 bytes held in namespaces, keys and values

    def put(self, namespace: str, key: str, value: str) -> None:
        for what, text in (("namespace", namespace), ("key", key)):
            if not text or _n(text) > MAX_NAME_BYTES:
                raise BadRequest(f"the KV {what} must be 1..{MAX_NAME_BYTES} bytes (UTF-8), got {_n(text)}")
        if _n(value) > MAX_VALUE_BYTES:
            raise BadRequest(f"a KV value may be at most {MAX_VALUE_BYTES} bytes (UTF-8); this one is {_n(value)}")
        ns = self.table.get(namespace)
        old = ns.get(key) if ns is not None else None
        grow = _n(value) - (_n(old) if old is not None else -_n(key)) + (_n(namespace) if ns is None else 0)
        if self.size + grow > self.max_bytes:
            raise BadRequest(
                f"the KV config holds {self.size} bytes; this entry would pass the {self.max_bytes}-byte limit"
            )
        self.table.setdefault(namespace, {})[key] = value
        self.size += grow

    def get(self, namespace: str, key: str) -> str | None:
        return self.table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        ns = self.table.get(namespace)
        if ns is not None:
            old = ns.pop(key, None)
            if old is not None:
                self.size -= _n(key) + _n(old)
            if not ns:
                del self.table[namespace]
                self.size -= _n(namespace)

    def namespace(self, namespace: str) -> dict[str, str] | None:
        ns = self.table.get(namespace)
        return dict(ns) if ns else None


def _n(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))
