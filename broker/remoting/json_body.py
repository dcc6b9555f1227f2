"""JSON request/response bodies as RocketMQ peers write and read them.

Java peers serialize bodies with fastjson, which writes integer map keys unquoted
(``{"brokerAddrs":{0:"10.0.0.1:10911"}}``, ``{"offsetTable":{"t@g":{0:12,1:7}}}``). That is not
JSON, so ``loads`` quotes such keys before parsing. ``dumps`` always writes standard JSON, which
both fastjson and the C++ client (jsoncpp with allowNumericKeys) accept.
"""
from __future__ import annotations

import json
import re

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
    """Parse a body from a Java or C++ peer, tolerating fastjson's unquoted integer keys."""
    text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    try:
        return json.loads(text)
    except ValueError:
        return json.loads(quote_numeric_keys(text))


def dumps(obj) -> bytes:
    """Compact standard JSON with sorted keys (what fastjson's standard-JSON mode produces)."""
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode("utf-8")
