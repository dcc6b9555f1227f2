"""RegisterBrokerBody: the topic configs a broker sends with REGISTER_BROKER (WIRE-FACTS §3.2).

Two encodings: plain JSON, and (header ``compressed=true``) a zlib stream of length-prefixed
parts with each topic config as the text "<name> <readQ> <writeQ> <perm> <filterType>".
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field

from rmqha.broker.support.errors import BadRequest
from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codes import PERM_READ, PERM_WRITE

# A compressed body inflates to at most this much (a topic config is ~50 bytes: over a million
# topics); a zlib bomb of a few MiB would otherwise take the name server's memory.
MAX_INFLATED_BYTES = 16 * 1024 * 1024


class RegisterBodyError(BadRequest):
    """A REGISTER_BROKER body (or topic config) that is not one a broker writes: answered with what is
    wrong (a BadRequest), never with an exception's name."""


class TooManyTopics(RegisterBodyError):
    """More topic configs than the name server takes from one broker (--max-topics-per-broker)."""


def _int(obj: dict, key: str, default: int) -> int:
    value = obj.get(key, default)
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise RegisterBodyError(f"topic config field {key} is not an integer: {str(value)[:80]!r}") from None


def _expect(value, kind: type, what: str):
    if not isinstance(value, kind):
        raise RegisterBodyError(f"{what} is a {type(value).__name__}, not a {kind.__name__}")
    return value


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
            read_queue_nums=_int(obj, "readQueueNums", 16),
            write_queue_nums=_int(obj, "writeQueueNums", 16),
            perm=_int(obj, "perm", PERM_READ | PERM_WRITE),
            topic_filter_type=str(obj.get("topicFilterType", "SINGLE_TAG")),
            topic_sys_flag=_int(obj, "topicSysFlag", 0),
            order=bool(obj.get("order", False)),
        )

    def to_json(self) -> dict:
        # "attributes" is 5.x's (always written, empty here); 4.x readers ignore it.
        return {
            "attributes": {},
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    def encode_text(self) -> str:
        return f"{self.topic_name} {self.read_queue_nums} {self.write_queue_nums} {self.perm} {self.topic_filter_type}"

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
    def decode(cls, data: bytes, compressed: bool, max_topics: int | None = None) -> RegisterBrokerBody:
        """Raises RegisterBodyError (a ValueError) for anything but a body a broker writes, and for a body
        of more than max_topics topic configs before decoding them (a count is cheap, 300,000 configs
        are not)."""
        try:
            if compressed:
                return cls._decode_compressed(data, max_topics)
            return cls.from_json(json_body.loads(data), max_topics)
        except (zlib.error, RecursionError, UnicodeDecodeError) as e:
            raise RegisterBodyError(f"register body does not decode: {e}") from None
        except RegisterBodyError:
            raise
        except ValueError as e:  # not JSON, or a truncated compressed body
            raise RegisterBodyError(str(e)) from None

    @classmethod
    def from_json(cls, obj: dict, max_topics: int | None = None) -> RegisterBrokerBody:
        _expect(obj, dict, "the register body")
        wrapper = _expect(obj.get("topicConfigSerializeWrapper") or {}, dict, "topicConfigSerializeWrapper")
        body = cls.from_wrapper_json(wrapper, max_topics)
        body.filter_servers = [str(s) for s in _expect(obj.get("filterServerList") or [], list, "filterServerList")]
        return body

    @classmethod
    def from_wrapper_json(cls, wrapper: dict, max_topics: int | None = None) -> RegisterBrokerBody:
        """A bare TopicConfigSerializeWrapper (what brokers before V3_0_11 send)."""
        table = _expect(wrapper.get("topicConfigTable") or {}, dict, "topicConfigTable")
        _check_count(len(table), max_topics)
        configs = {}
        for name, cfg in table.items():
            tc = TopicConfig.from_json({"topicName": name, **_expect(cfg, dict, f"topic config {name[:80]!r}")})
            configs[tc.topic_name] = tc
        version = _expect(wrapper.get("dataVersion") or {"counter": 0, "timestamp": 0}, dict, "dataVersion")
        return cls(configs, dict(version))

    @classmethod
    def _decode_compressed(cls, data: bytes, max_topics: int | None = None) -> RegisterBrokerBody:
        inflater = zlib.decompressobj()
        raw = inflater.decompress(data, MAX_INFLATED_BYTES)
        if inflater.unconsumed_tail:
            raise RegisterBodyError(f"compressed register body inflates past {MAX_INFLATED_BYTES} bytes")
        if not inflater.eof:
            raise RegisterBodyError("compressed register body truncated (the zlib stream does not end)")
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

        data_version = _expect(json_body.loads(chunk()), dict, "dataVersion")
        if pos + 4 > len(raw):
            raise ValueError("compressed register body truncated")
        (count,) = struct.unpack_from(">i", raw, pos)
        pos += 4
        configs = {}
        if count < 0 or count > (len(raw) - pos) // 8:  # each config takes 4 bytes of length and more
            raise RegisterBodyError(
                f"compressed register body declares {count} topic configs for {len(raw) - pos} bytes"
            )
        _check_count(count, max_topics)
        for _ in range(count):
            try:
                tc = TopicConfig.decode_text(chunk().decode("utf-8"))
            except ValueError as e:
                raise RegisterBodyError(f"a topic config of the register body does not parse: {e}") from None
            configs[tc.topic_name] = tc
        filter_servers = json.loads(chunk().decode("utf-8") or "[]") or []
        return cls(configs, data_version, [str(s) for s in _expect(filter_servers, list, "filterServerList")])

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


def _check_count(count: int, max_topics: int | None) -> None:
    if max_topics is not None and count > max_topics:
        raise TooManyTopics(
            f"the register body carries {count} topic configs; this name server takes at most "
            f"{max_topics} per broker (--max-topics-per-broker)"
        )


def body_crc32(body: bytes) -> int:
    """What REGISTER_BROKER's bodyCrc32 carries (UtilAll.crc32: CRC32 masked to 31 bits)."""
    return zlib.crc32(body) & 0x7FFFFFFF
