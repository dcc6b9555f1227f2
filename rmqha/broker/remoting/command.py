"""RemotingCommand: one request or response of the RocketMQ remoting protocol (WIRE-FACTS §1)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from rmqha.broker.support.errors import BadRequest
from rmqha.broker.remoting.codes import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    VERSION_V4_9_8,
    ResponseCode,
    SerializeType,
)

DEFAULT_LANGUAGE = "PYTHON"

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
# Java's Integer.parseInt/Long.parseLong: optional sign, digits, nothing else (no spaces, no "_").
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+\Z")

_REQUIRED = object()


class HeaderFieldError(BadRequest):
    """A custom-header field is missing or does not parse; processors turn it into an error reply."""


@dataclass(eq=True, repr=False)
class RemotingCommand:
    code: int
    language: str = DEFAULT_LANGUAGE
    version: int = VERSION_V4_9_8
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON

    # ---- construction ---------------------------------------------------------------------------

    @classmethod
    def request(
        cls, code: int, ext_fields: dict[str, object] | None = None, body: bytes = b"", **kwargs
    ) -> RemotingCommand:
        """A request; ext field values are stringified the way Java would send them."""
        return cls(code=int(code), ext_fields=stringify_fields(ext_fields), body=body, **kwargs)

    def make_response(
        self,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        ext_fields: dict[str, object] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """The reply to this request: same opaque and serialize type, response bit set."""
        return RemotingCommand(
            code=int(code),
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            remark=remark,
            ext_fields=stringify_fields(ext_fields),
            body=body,
            serialize_type=self.serialize_type,
        )

    # ---- flags ----------------------------------------------------------------------------------

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def mark_oneway(self) -> None:
        self.flag |= FLAG_ONEWAY

    # ---- ext field getters (Java parsing rules) ---------------------------------------------------

    def get_str(self, name: str, default=_REQUIRED) -> str:
        value = self.ext_fields.get(name)
        return _absent(name, default) if value is None else value

    def get_int(self, name: str, default=_REQUIRED) -> int:
        """Integer.parseInt: 32-bit, strict syntax."""
        return self._get_number(name, default, _INT32)

    def get_long(self, name: str, default=_REQUIRED) -> int:
        """Long.parseLong: 64-bit, strict syntax."""
        return self._get_number(name, default, _INT64)

    def get_bool(self, name: str, default=_REQUIRED) -> bool:
        """Boolean.parseBoolean: only "true" (any case) is true, so the C++ client's "1" is false."""
        value = self.ext_fields.get(name)
        return _absent(name, default) if value is None else java_parse_boolean(value)

    def get_lenient_bool(self, name: str, default=_REQUIRED) -> bool:
        """Like get_bool but also takes "1" as true, since the C++ client sends bools as "0"/"1"."""
        value = self.ext_fields.get(name)
        return _absent(name, default) if value is None else lenient_parse_boolean(value)

    def _get_number(self, name: str, default, bounds: tuple[int, int]) -> int:
        value = self.ext_fields.get(name)
        if value is None:
            return _absent(name, default)
        try:
            return java_parse_int(value, bounds)
        except ValueError as e:
            raise HeaderFieldError(f"the custom field <{name}> {e}") from None

    # ---- display ----------------------------------------------------------------------------------

    def __repr__(self) -> str:
        kind = "response" if self.is_response else ("oneway" if self.is_oneway else "request")
        return (
            f"RemotingCommand({kind} code={self.code} opaque={self.opaque} flag={self.flag} "
            f"language={self.language} version={self.version} remark={self.remark!r} "
            f"ext_fields={self.ext_fields!r} body={len(self.body)}B "
            f"type={self.serialize_type.name})"
        )


INT32, INT64 = _INT32, _INT64
REQUIRED = _REQUIRED


def _absent(name: str, default):
    """A header field that is not there: its default, or HeaderFieldError when it has none (REQUIRED),
    with Java's message for a null @CFNotNull field."""
    if default is _REQUIRED:
        raise HeaderFieldError(f"the custom field <{name}> is null")
    return default


def read_numbers(fields: dict[str, str], specs) -> list[int]:
    """RemotingCommand.get_int/get_long for several fields of one header at once (the send path reads
    seven): specs are (key, default or REQUIRED, INT32 or INT64, name), name the field's name in the
    errors (the key may be its V2 short name); the same values and errors."""
    out = []
    for key, default, bounds, name in specs:
        value = fields.get(key)
        if value is None:
            out.append(_absent(name, default))
            continue
        try:
            out.append(java_parse_int(value, bounds))
        except ValueError as e:
            raise HeaderFieldError(f"the custom field <{name}> {e}") from None
    return out


def java_parse_int(text: str, bounds: tuple[int, int] = _INT32) -> int:
    if len(text) < 19 and text.isascii() and text.isdigit():  # the usual header value, without the regex
        value = int(text)
        if bounds[0] <= value <= bounds[1]:
            return value
    if not _JAVA_INTEGER.match(text):
        raise ValueError(f"is not a number: {text!r}")
    value = int(text)
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"is out of range: {text!r}")
    return value


def java_parse_boolean(text: str) -> bool:
    return text.lower() == "true"


def lenient_parse_boolean(text: str) -> bool:
    return text.strip().lower() in ("true", "1")


def java_string(value: object) -> str:
    """How Java would render a header value as a string (bools lower-case, numbers in decimal)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        # fastjson's JSONObject/JSONArray toString: compact JSON.
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


def stringify_fields(fields: dict[str, object] | None) -> dict[str, str]:
    """Drop None values (Java leaves null header fields out) and stringify the rest."""
    if not fields:
        return {}
    return {str(k): java_string(v) for k, v in fields.items() if v is not None}
