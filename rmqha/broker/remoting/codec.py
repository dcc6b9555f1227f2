"""IO-free encoding and decoding of remoting frames (WIRE-FACTS §1).

Frame: 4-byte length L (bytes after itself), 4-byte word (serialize type << 24 | header length H),
H header bytes (JSON or ROCKETMQ binary), then the body. All integers big-endian.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator

from rmqha.broker.remoting.codes import (
    DEFAULT_MAX_FRAME_LENGTH,
    DEFAULT_MAX_HEADER_LENGTH,
    LanguageCode,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from rmqha.broker.remoting.command import RemotingCommand, java_string
from rmqha.broker.remoting.json_body import _SURROGATE_ESCAPE, encode_utf8, scrub_surrogates

_HEADER_LENGTH_MASK = 0x00FFFFFF
_SERIALIZE_TYPES = {int(t): t for t in SerializeType}
# json.dumps with these options builds a new encoder per call; one instance does the same work.
_JSON_HEADER_ENCODER = json.JSONEncoder(separators=(",", ":"), sort_keys=True, ensure_ascii=False)
_FRAME_HEAD = struct.Struct(">II")
# The string encoder json uses with ensure_ascii=False (the C one when there is one).
_json_string = json.encoder.encode_basestring
# Codes are ints or IntEnum members (ResponseCode, RequestCode); json writes both as the number.
_INT_TYPES = frozenset({int, ResponseCode, RequestCode})


class FrameError(ValueError):
    """A malformed or oversize frame. The connection that sent it cannot be trusted any more."""


# ---- encoding -----------------------------------------------------------------------------------


def encode(cmd: RemotingCommand) -> bytes:
    """The whole frame, length prefix included, in ``cmd.serialize_type``."""
    header = encode_header(cmd)
    if len(header) > _HEADER_LENGTH_MASK:
        raise ValueError(f"header of {len(header)} bytes does not fit in 24 bits")
    word = (int(cmd.serialize_type) << 24) | len(header)
    body = cmd.body
    if not body:
        return _FRAME_HEAD.pack(4 + len(header), word) + header
    return b"".join((_FRAME_HEAD.pack(4 + len(header) + len(body), word), header, body))


def encode_header(cmd: RemotingCommand) -> bytes:
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        return _encode_binary_header(cmd)
    return _encode_json_header(cmd)


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    """What _encode_json_header_generic writes, built directly for the usual header (int fields,
    str language and remark, str extFields): the same bytes, in a fraction of the time."""
    code, flag, opaque, version, language, remark = (
        cmd.code,
        cmd.flag,
        cmd.opaque,
        cmd.version,
        cmd.language,
        cmd.remark,
    )
    if not (
        type(code) in _INT_TYPES
        and type(flag) is int
        and type(opaque) is int
        and type(version) is int
        and type(language) is str
        and (remark is None or type(remark) is str)
    ):
        return _encode_json_header_generic(cmd)
    ext = cmd.ext_fields
    esc = _json_string
    parts = ['{"code":', str(int(code))]
    if ext:
        if not _all_str(ext):
            ext = {str(k): java_string(v) for k, v in ext.items() if v is not None}
        parts.append(',"extFields":{')
        parts.append(",".join([esc(k) + ":" + esc(ext[k]) for k in sorted(ext)]))
        parts.append("}")
    parts += (',"flag":', str(flag), ',"language":', esc(language), ',"opaque":', str(opaque))
    if remark is not None:
        parts += (',"remark":', esc(remark))
    parts += (',"serializeTypeCurrentRPC":"JSON","version":', str(version), "}")
    return encode_utf8("".join(parts))


def _encode_json_header_generic(cmd: RemotingCommand) -> bytes:
    # Java 4.9 (fastjson over RemotingCommand's getters) writes exactly these, sorted, plus remark and
    # extFields when not null; current clients (rocketmq-client-rust) drop a header without
    # serializeTypeCurrentRPC.
    obj: dict[str, object] = {
        "code": cmd.code,
        "flag": cmd.flag,
        "language": cmd.language,
        "opaque": cmd.opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": cmd.version,
    }
    if cmd.remark is not None:
        obj["remark"] = cmd.remark
    ext = cmd.ext_fields
    if ext:
        # The C++ client reads reply header values only when they are JSON strings.
        obj["extFields"] = ext if _all_str(ext) else {str(k): java_string(v) for k, v in ext.items() if v is not None}
    return encode_utf8(_JSON_HEADER_ENCODER.encode(obj))


def _all_str(fields: dict) -> bool:
    """Every key and value is a str already (the usual case: nothing to convert)."""
    for k, v in fields.items():
        if type(k) is not str or type(v) is not str:
            return False
    return True


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    try:
        language = LanguageCode[cmd.language]
    except KeyError:
        language = LanguageCode.OTHER
    parts = [struct.pack(">hBhii", cmd.code, language, cmd.version, cmd.opaque, cmd.flag)]
    remark = encode_utf8(cmd.remark) if cmd.remark else b""
    parts.append(struct.pack(">i", len(remark)) + remark)
    ext = bytearray()
    for key, value in cmd.ext_fields.items():
        if value is None:
            continue
        k = encode_utf8(str(key))
        v = encode_utf8(java_string(value))
        ext += struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v
    parts.append(struct.pack(">i", len(ext)) + bytes(ext))
    return b"".join(parts)


# ---- decoding -----------------------------------------------------------------------------------


def decode_frame(frame: bytes | memoryview, max_header_length: int = DEFAULT_MAX_HEADER_LENGTH) -> RemotingCommand:
    """Decode one frame given without its 4-byte length prefix."""
    if len(frame) < 4:
        raise FrameError(f"frame of {len(frame)} bytes has no header-length word")
    (word,) = struct.unpack_from(">I", frame, 0)
    type_byte = word >> 24
    header_length = word & _HEADER_LENGTH_MASK
    if header_length > len(frame) - 4:
        raise FrameError(
            f"header length {header_length} exceeds the frame's {len(frame) - 4} bytes after the length word"
        )
    if header_length > max_header_length:
        raise FrameError(f"header length {header_length} exceeds the maximum header size {max_header_length}")
    serialize_type = _SERIALIZE_TYPES.get(type_byte)
    if serialize_type is None:
        raise FrameError(f"unknown serialize type {type_byte}")
    header = bytes(frame[4 : 4 + header_length])
    body = bytes(frame[4 + header_length :])
    try:
        if serialize_type == SerializeType.ROCKETMQ:
            cmd = _decode_binary_header(header)
        else:
            cmd = _decode_json_header(header)
    except RecursionError:
        # JSON nested deeper than the interpreter's recursion limit (about 1000 levels).
        raise FrameError("header nested too deeply") from None
    cmd.body = body
    cmd.serialize_type = serialize_type
    return cmd


def decode(data: bytes) -> RemotingCommand:
    """Decode exactly one complete frame, length prefix included."""
    if len(data) < 4:
        raise FrameError(f"{len(data)} bytes is too short for a length prefix")
    (length,) = struct.unpack_from(">I", data, 0)
    if length != len(data) - 4:
        raise FrameError(f"length prefix says {length} bytes but {len(data) - 4} follow")
    return decode_frame(data[4:])


def _decode_json_header(header: bytes) -> RemotingCommand:
    try:
        # json.loads skips the trailing "\n" that the C++ client's jsoncpp writer appends.
        text = header.decode("utf-8")
        obj = json.loads(text)
    except (UnicodeDecodeError, ValueError) as e:
        raise FrameError(f"header is not valid JSON: {e}; header starts {header[:80]!r}") from None
    if ("\\ud" in text or "\\uD" in text) and _SURROGATE_ESCAPE.search(text):
        # A lone "\ud800" decodes to a str no UTF-8 encoder takes; make it "?" as Java's would.
        obj = scrub_surrogates(obj)
    if not isinstance(obj, dict):
        raise FrameError(f"JSON header is a {type(obj).__name__}, not an object")
    if "code" not in obj:
        raise FrameError("JSON header has no code")
    ext = obj.get("extFields")
    if ext is not None and not isinstance(ext, dict):
        raise FrameError(f"extFields is a {type(ext).__name__}, not an object")
    remark = obj.get("remark")
    language = obj.get("language", "JAVA")
    if isinstance(language, int) and not isinstance(language, bool):
        language = _language_name(language)
    return RemotingCommand(
        code=_json_int(obj, "code"),
        language=language if type(language) is str else str(language),
        version=_json_int(obj, "version"),
        opaque=_json_int(obj, "opaque"),
        flag=_json_int(obj, "flag"),
        remark=None if remark is None else java_string(remark),
        # Java decodes into HashMap<String,String>: numbers and booleans become their text.
        ext_fields=(ext if _all_str(ext) else {str(k): java_string(v) for k, v in ext.items() if v is not None})
        if ext
        else {},
    )


def _json_int(obj: dict, key: str) -> int:
    """An int field of the header as Java reads it: 32 bits, or the frame is malformed."""
    value = obj.get(key, 0)
    if type(value) is int and -0x80000000 <= value <= 0x7FFFFFFF:
        return value
    if type(value) is not int:
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise FrameError(f"header field {key} is not an integer: {_clip(value)}")
        try:
            value = int(value)
        except ValueError:
            raise FrameError(f"header field {key} is not an integer: {_clip(value)}") from None
    if not -0x80000000 <= value <= 0x7FFFFFFF:
        raise FrameError(f"header field {key} is out of the 32-bit range: {_clip(value)}")
    return value


def _clip(value) -> str:
    text = repr(value) if not isinstance(value, int) or value.bit_length() < 128 else f"<{value.bit_length()}-bit int>"
    return text if len(text) <= 80 else text[:80] + "..."


def _language_name(number: int) -> str:
    try:
        return LanguageCode(number).name
    except ValueError:
        return LanguageCode.OTHER.name


class _Reader:
    """Bounds-checked big-endian reads over a binary header."""

    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise FrameError(
                f"binary header truncated reading {what}: need {n} bytes at offset {self.pos}, "
                f"header has {len(self.data)}"
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str, what: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))


def _decode_binary_header(header: bytes) -> RemotingCommand:
    r = _Reader(header)
    code, language, version, opaque, flag = r.unpack(">hBhii", "fixed fields")
    (remark_length,) = r.unpack(">i", "remark length")
    remark = _utf8(r.take(remark_length, "remark"), "remark") if remark_length > 0 else None
    (ext_length,) = r.unpack(">i", "extFields length")
    ext = _Reader(r.take(ext_length, "extFields"))
    fields: dict[str, str] = {}
    while ext.pos < len(ext.data):
        (key_length,) = ext.unpack(">h", "extFields key length")
        key = _utf8(ext.take(key_length, "extFields key"), "extFields key")
        (value_length,) = ext.unpack(">i", "extFields value length")
        fields[key] = _utf8(ext.take(value_length, "extFields value"), "extFields value")
    return RemotingCommand(
        code=code,
        language=_language_name(language),
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=fields,
    )


def _utf8(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FrameError(f"binary header {what} is not UTF-8: {e}") from None


# ---- stream framing -----------------------------------------------------------------------------


class FrameDecoder:
    """Turns a byte stream received in arbitrary pieces into RemotingCommands.

    Holds at most one incomplete frame (bounded by max_frame_length) plus what one feed brought.
    The buffer is dropped as soon as everything in it has been decoded, so an idle connection keeps
    no memory from its last large request. After a FrameError the stream is out of sync for good:
    every later feed raises the same error.
    """

    def __init__(
        self, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH, max_header_length: int = DEFAULT_MAX_HEADER_LENGTH
    ):
        # Counts the 4-byte length field too, as Netty's LengthFieldBasedFrameDecoder does.
        self.max_frame_length = max_frame_length
        self.max_header_length = max_header_length
        self._buffer = bytearray()
        self._pos = 0  # start of the first unconsumed byte; the prefix is dropped lazily
        self._error: FrameError | None = None

    @property
    def buffered(self) -> int:
        return len(self._buffer) - self._pos

    def feed(self, data: bytes) -> Iterator[RemotingCommand]:
        """Buffer ``data`` now; the returned iterator yields each complete command in order.

        A malformed frame raises FrameError from the iterator after the good frames before it.
        """
        if self._error is None:
            # Drop consumed bytes once per feed, not once per frame (many small frames per read).
            if self._pos:
                del self._buffer[: self._pos]
                self._pos = 0
            self._buffer += data
        return self._drain()

    def take_sends(self, scan, cluster: str, limit: int):
        """(buffer, sends): the complete plain sends at the head of the buffer as the compiled scan
        reads them (rmqha/broker/fastpath), consumed; their positions are valid in that buffer until the next
        feed. The scan stops before anything it does not take, which _drain then decodes."""
        if self._error is not None:
            return self._buffer, []
        buf = self._buffer
        sends, pos = scan(buf, self._pos, len(buf), self.max_frame_length, self.max_header_length, cluster, limit)
        self._pos = pos
        return buf, sends

    def release(self) -> None:
        """Forget every buffered byte (the connection is gone)."""
        self._buffer = bytearray()
        self._pos = 0

    def _drain(self) -> Iterator[RemotingCommand]:
        while True:
            if self._error is not None:
                raise self._error
            start = self._pos
            available = len(self._buffer) - start
            if available < 4:
                if available == 0 and start:
                    self.release()  # a new, empty buffer: the old one's capacity goes back
                return
            (length,) = struct.unpack_from(">I", self._buffer, start)
            problem = self._check_length(length)
            if problem is not None:
                self._fail(problem)
                continue
            if available < 4 + length:
                return
            self._pos = start + 4 + length
            # A view, not a copy: decode_frame copies the header and the body out exactly once.
            frame = memoryview(self._buffer)[start + 4 : start + 4 + length]
            try:
                cmd = decode_frame(frame, self.max_header_length)
            except FrameError as e:
                self._fail(str(e))
                continue
            finally:
                frame.release()  # the buffer cannot be resized while a view of it exists
            yield cmd

    def _check_length(self, length: int) -> str | None:
        if length < 4:
            return f"frame length {length} is less than 4 (no room for the header-length word)"
        if length + 4 > self.max_frame_length:
            return f"frame length {length} exceeds the maximum frame size {self.max_frame_length}"
        return None

    def _fail(self, reason: str) -> None:
        self._error = FrameError(reason)
        self.release()
