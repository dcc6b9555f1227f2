"""RegisterBrokerBody: the topic configs a broker sends with REGISTER_BROKER (WIRE-FACTS §3.2).

Two encodings: plain JSON, and (header ``compressed=true``) a zlib stream of length-prefixed
parts with each topic config as the text "<name> <readQ> <writeQ> <perm> <filterType>".
"""
from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field

from broker.remoting import json_body
from broker.remoting.codes import PERM_READ, PERM_WRITE


@dataclass
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    @classmethod
    def from_json(cls, obj: dict) -> TopicConfig:
        return cls(
            topic_name=str(obj["topicName"]),
            read_queue_nums=int(obj.get("readQueueNums", 16)),
            write_queue_nums=int(obj.get("writeQueueNums", 16)),
            perm=int(obj.get("perm", PERM_READ | PERM_WRITE)),
            topic_filter_type=str(obj.get("topicFilterType", "SINGLE_TAG")),
            topic_sys_flag=int(obj.get("topicSysFlag", 0)),
            order=bool(obj.get("order", False)),
        )

    def to_json(self) -> dict:
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    def encode_text(self) -> str:
        return (f"{self.topic_name} {self.read_queue_nums} {self.write_queue_nums} "
                f"{self.perm} {self.topic_filter_type}")

    @classmethod
    def decode_text(cls, text: str) -> TopicConfig:
        # 4.x writes five fields; 5.x appends a sixth (attributes JSON) that we do not need.
        parts = text.split(" ")
        if len(parts) < 5:
            raise ValueError(f"topic config text has {len(parts)} fields, expected 5: {text!r}")
        return cls(parts[0], int(parts[1]), int(parts[2]), int(parts[3]), parts[4])


@dataclass
class RegisterBrokerBody:
    topic_configs: dict[str, TopicConfig] = field(default_factory=dict)
    # DataVersion as sent ({"timestamp": ms, "counter": n}); compared, never interpreted.
    data_version: dict = field(default_factory=lambda: {"counter": 0, "timestamp": 0})
    filter_servers: list[str] = field(default_factory=list)

    # ---- decoding -------------------------------------------------------------------------------

    @classmethod
    def decode(cls, data: bytes, compressed: bool) -> RegisterBrokerBody:
        if compressed:
            return cls._decode_compressed(data)
        return cls.from_json(json_body.loads(data))

    @classmethod
    def from_json(cls, obj: dict) -> RegisterBrokerBody:
        wrapper = obj.get("topicConfigSerializeWrapper") or {}
        body = cls.from_wrapper_json(wrapper)
        body.filter_servers = [str(s) for s in obj.get("filterServerList") or []]
        return body

    @classmethod
    def from_wrapper_json(cls, wrapper: dict) -> RegisterBrokerBody:
        """A bare TopicConfigSerializeWrapper (what brokers before V3_0_11 send)."""
        table = wrapper.get("topicConfigTable") or {}
        configs = {}
        for name, cfg in table.items():
            tc = TopicConfig.from_json({"topicName": name, **cfg})
            configs[tc.topic_name] = tc
        return cls(configs, dict(wrapper.get("dataVersion") or {"counter": 0, "timestamp": 0}))

    @classmethod
    def _decode_compressed(cls, data: bytes) -> RegisterBrokerBody:
        raw = zlib.decompress(data)
        pos = 0

        def chunk() -> bytes:
            nonlocal pos
            if pos + 4 > len(raw):
                raise ValueError("compressed register body truncated")
            (n,) = struct.unpack_from(">i", raw, pos)
            if n < 0 or pos + 4 + n > len(raw):
                raise ValueError("compressed register body truncated")
            pos += 4 + n
            return raw[pos - n : pos]

        data_version = json_body.loads(chunk())
        if pos + 4 > len(raw):
            raise ValueError("compressed register body truncated")
        (count,) = struct.unpack_from(">i", raw, pos)
        pos += 4
        configs = {}
        for _ in range(count):
            tc = TopicConfig.decode_text(chunk().decode("utf-8"))
            configs[tc.topic_name] = tc
        filter_servers = json.loads(chunk().decode("utf-8") or "[]") or []
        return cls(configs, data_version, [str(s) for s in filter_servers])

    # ---- encoding (brokers and tests) --------------------------------------------------------------

    def to_json(self) -> dict:
        return {
            "filterServerList": list(self.filter_servers),
            "topicConfigSerializeWrapper": {
                "dataVersion": dict(self.data_version),
                "topicConfigTable": {name: tc.to_json() for name, tc in self.topic_configs.items()},
            },
        }

    def encode(self, compressed: bool = False) -> bytes:
        if not compressed:
            return json_body.dumps(self.to_json())
        out = bytearray()

        def put(b: bytes) -> None:
            out.extend(struct.pack(">i", len(b)) + b)

        put(json_body.dumps(self.data_version))
        out.extend(struct.pack(">i", len(self.topic_configs)))
        for tc in self.topic_configs.values():
            put(tc.encode_text().encode("utf-8"))
        put(json_body.dumps(list(self.filter_servers)))
        return zlib.compress(bytes(out), 9)


def body_crc32(body: bytes) -> int:
    """What REGISTER_BROKER's bodyCrc32 carries (UtilAll.crc32: CRC32 masked to 31 bits)."""
    return zlib.crc32(body) & 0x7FFFFFFF
