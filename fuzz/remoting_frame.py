"""Target: the remoting frame decoder (rmqha/broker/remoting/codec.py).

Input: a count byte and that many 2-byte cut points, a byte choosing the decoder's maximum frame size,
then the byte stream. Contract:
* FrameDecoder.feed over the stream cut at those points, decode_frame and decode raise FrameError and
  nothing else; after a FrameError every later feed raises FrameError too;
* the decoder yields the same commands however the stream is cut;
* every decoded command has the field types RemotingCommand declares (ext fields str -> str), and
  codec.encode of it does not raise and decodes back with the same code, opaque, flag and ext fields.
"""

from __future__ import annotations

from rmqha.broker.remoting import codec
from rmqha.broker.remoting.codec import FrameDecoder, FrameError
from rmqha.broker.remoting.codes import DEFAULT_MAX_FRAME_LENGTH
from fuzz.provider import Input, pieces, read_cuts

SMALL_MAXIMA = (DEFAULT_MAX_FRAME_LENGTH, DEFAULT_MAX_FRAME_LENGTH, 8, 64, 4096)


def check_command(cmd) -> None:
    """The decoded command is well typed and survives codec.encode -> codec.decode."""
    for name in ("code", "opaque", "flag", "version"):
        assert type(getattr(cmd, name)) is int, f"{name} decoded as {type(getattr(cmd, name)).__name__}"
    assert type(cmd.language) is str, f"language decoded as {type(cmd.language).__name__}"
    assert cmd.remark is None or type(cmd.remark) is str, f"remark decoded as {type(cmd.remark).__name__}"
    bad = {k: v for k, v in cmd.ext_fields.items() if type(k) is not str or type(v) is not str}
    assert not bad, f"ext fields must be str -> str, got {bad!r}"
    frame = codec.encode(cmd)  # must not raise: a decoded request is answered with these fields
    back = codec.decode(frame)
    assert (back.code, back.opaque, back.flag) == (cmd.code, cmd.opaque, cmd.flag), (
        f"re-encoded command came back as code={back.code} opaque={back.opaque} flag={back.flag}, "
        f"was code={cmd.code} opaque={cmd.opaque} flag={cmd.flag}"
    )
    assert back.ext_fields == cmd.ext_fields, f"ext fields {cmd.ext_fields!r} came back as {back.ext_fields!r}"


def feed_all(chunks: list[bytes], max_length: int) -> list:
    """What a FrameDecoder yields for these chunks: commands (as comparable tuples), then 'error'."""
    dec = FrameDecoder(max_length)
    out = []
    failed = False
    for chunk in chunks:
        try:
            for cmd in dec.feed(chunk):
                assert not failed, "a FrameDecoder yielded a command after a FrameError"
                check_command(cmd)
                out.append(
                    (
                        cmd.code,
                        cmd.opaque,
                        cmd.flag,
                        cmd.serialize_type,
                        cmd.remark,
                        tuple(cmd.ext_fields.items()),
                        cmd.body,
                    )
                )
        except FrameError:
            if not failed:
                out.append("error")
            failed = True
    if failed:
        try:
            list(dec.feed(b"\0\0\0\x08\0\0\0\0{}"))
        except FrameError:
            pass
        else:
            raise AssertionError("a FrameDecoder accepted bytes after a FrameError (the error must stick)")
    assert dec.buffered <= max(len(b"".join(chunks)), 0)
    return out


def TestOneInput(data: bytes) -> None:
    inp = Input(data)
    cuts = read_cuts(inp)
    max_length = inp.pick(SMALL_MAXIMA)
    stream = inp.rest()

    split = feed_all(pieces(stream, cuts), max_length)
    whole = feed_all([stream], max_length)
    assert split == whole, f"cutting the stream changed what it decodes to: {split!r} vs {whole!r}"

    for one in (lambda: codec.decode_frame(stream[4:]), lambda: codec.decode(stream)):
        try:
            cmd = one()
        except FrameError:
            continue
        check_command(cmd)
