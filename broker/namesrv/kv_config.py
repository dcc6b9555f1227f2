"""Namespaced key/value settings kept by the name server (PUT/GET/DELETE_KV_CONFIG).

In memory only: Java persists them to kvConfig.json, which this reference cluster does not need.
The namespace ORDER_TOPIC_CONFIG holds "brokerName:queueNum;..." per ordered topic.
"""
from __future__ import annotations

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigManager:
    def __init__(self):
        self.table: dict[str, dict[str, str]] = {}

    def put(self, namespace: str, key: str, value: str) -> None:
        self.table.setdefault(namespace, {})[key] = value

    def get(self, namespace: str, key: str) -> str | None:
        return self.table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        ns = self.table.get(namespace)
        if ns is not None:
            ns.pop(key, None)
            if not ns:
                del self.table[namespace]

    def namespace(self, namespace: str) -> dict[str, str] | None:
        ns = self.table.get(namespace)
        return dict(ns) if ns else None
