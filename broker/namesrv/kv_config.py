"""Namespaced key/value settings kept by the name server (PUT/GET/DELETE_KV_CONFIG).

In memory only: Java persists them to kvConfig.json, which this reference cluster does not need.
The namespace ORDER_TOPIC_CONFIG holds "brokerName:queueNum;..." per ordered topic.
"""
from __future__ import annotations

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


from broker.errors import BadRequest

# ours: the table lives in memory and any peer may write it; Java bounds it by nothing but the heap.
MAX_KV_BYTES = 16 * 1024 * 1024


class KVConfigManager:
    def __init__(self, max_bytes: int = MAX_KV_BYTES):
        self.table: dict[str, dict[str, str]] = {}
        self.max_bytes = max_bytes
        self.size = 0  # characters held in namespaces, keys and values

    def put(self, namespace: str, key: str, value: str) -> None:
        ns = self.table.get(namespace)
        old = ns.get(key) if ns is not None else None
        grow = len(value) - (len(old) if old is not None else -len(key)) + (len(namespace) if ns is None else 0)
        if self.size + grow > self.max_bytes:
            raise BadRequest(f"the KV config holds {self.size} characters; this entry would pass the "
                             f"{self.max_bytes} limit")
        self.table.setdefault(namespace, {})[key] = value
        self.size += grow

    def get(self, namespace: str, key: str) -> str | None:
        return self.table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        ns = self.table.get(namespace)
        if ns is not None:
            old = ns.pop(key, None)
            if old is not None:
                self.size -= len(key) + len(old)
            if not ns:
                del self.table[namespace]
                self.size -= len(namespace)

    def namespace(self, namespace: str) -> dict[str, str] | None:
        ns = self.table.get(namespace)
        return dict(ns) if ns else None
