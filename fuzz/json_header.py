"""Target: the JSON header decoder alone (codec.decode_frame with serialize type JSON), structure-aware.

The header text comes from fuzz.jsongen (real field names with hostile values: lone surrogate escapes,
huge numbers, nesting thousands deep, non-string ext values, repeated keys, non-JSON bytes). Contract:
FrameError or a command that passes remoting_frame.check_command (well typed, re-encodes, decodes back).
"""

from __future__ import annotations

import struct

from rmqha.broker.remoting import codec
from rmqha.broker.remoting.codec import FrameError
from fuzz import jsongen
from fuzz.provider import Input
from fuzz.remoting_frame import check_command


def TestOneInput(data: bytes) -> None:
    inp = Input(data)
    type_byte = inp.pick((0, 0, 0, 0, 0, 0, 1, 7))
    head = jsongen.header(inp)
    body = inp.take(inp.byte())
    frame = struct.pack(">I", (type_byte << 24) | len(head)) + head + body
    try:
        cmd = codec.decode_frame(frame)
    except FrameError:
        return
    check_command(cmd)
