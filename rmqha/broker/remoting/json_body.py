"""JSON request/response bodies as RocketMQ peers write and read them.

Java peers serialize bodies with fastjson, which writes integer map keys unquoted
(``{"brokerAddrs":{0:"10.0.0.1:10911"}}``, ``{"offsetTable":{"t@g":{0:12,1:7}}}``). That is not
JSON, so ``loads`` quotes such keys before parsing. ``dumps`` always writes standard JSON, which
both fastjson and the C++ client (jsoncpp with allowNumericKeys) accept.
"""

from __future__ import annotations

import json
import re

from rmqha.broker.remoting.command import BadRequest

# A whole string literal (left untouched), or a bare integer in key position: after "{" or ","
# and followed by ":". Strings are matched as single tokens, so nothing inside them is rewritten.
_STRING_OR_BARE_KEY = re.compile(r'"(?:[^"\\]|\\.)*"|([{,])(\s*)(-?\d+)(\s*):', re.DOTALL)


def _quote_key(m: re.Match) -> str:
    if m.group(1) is None:
        return m.group(0)
    return f'{m.group(1)}{m.group(2)}"{m.group(3)}"{m.group(4)}:'


def quote_numeric_keys(text: str) -> str:
    return _STRING_OR_BARE_KEY.sub(_quote_key, text)


def loads(data: bytes | str):
    """Parse a body from a Java or C++ peer, tolerating fastjson's unquoted integer keys.

    Raises ValueError for anything that is not such JSON, nesting too deep to parse included.
    Lone UTF-16 surrogates ("\\ud800") become "?", as Java's UTF-8 encoder writes them, so no
    string taken from a body can make a later encode fail.
    """
    text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    try:
        try:
            obj = json.loads(text)
        except ValueError:
            obj = json.loads(quote_numeric_keys(text))
        return scrub_surrogates(obj) if _SURROGATE_ESCAPE.search(text) else obj
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def loads_request(data: bytes, what: str):
    """loads() for a request body: a JSON object, or BadRequest naming the body."""
    try:
        obj = loads(data) if data else {}
    except (UnicodeDecodeError, ValueError) as e:
        raise BadRequest(f"the {what} body is not valid JSON: {_short(e)}") from None
    if not isinstance(obj, dict):
        raise BadRequest(f"the {what} body is a JSON {type(obj).__name__}, not an object")
    return obj


def dumps(obj) -> bytes:
    """Compact standard JSON with sorted keys (what fastjson's standard-JSON mode produces)."""
    return encode_utf8(json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False))


# A JSON escape of a UTF-16 surrogate (D800-DFFF): the only way a lone surrogate gets into a str
# decoded from valid UTF-8. Pairs are combined by json.loads; the scrub only touches lone ones.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def scrub_surrogates(obj):
    """obj with every lone surrogate in its strings (keys too) replaced by "?"."""
    if isinstance(obj, str):
        return obj.encode("utf-8", "replace").decode("utf-8") if _has_surrogate(obj) else obj
    if isinstance(obj, dict):
        return {scrub_surrogates(k): scrub_surrogates(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [scrub_surrogates(v) for v in obj]
    return obj


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def encode_utf8(text: str) -> bytes:
    """UTF-8, with any lone surrogate written as "?" (Java's String.getBytes) instead of failing."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


def _short(e: Exception) -> str:
    text = str(e)
    return text if len(text) <= 200 else text[:200] + "..."
