"""Reads fuzz input as a sequence of choices. Past the end every read returns zeros, so any input,
however short, is a complete test case (the same idea as atheris.FuzzedDataProvider, without it)."""

from __future__ import annotations


class Input:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes):
        self.data = bytes(data)
        self.pos = 0

    @property
    def remaining(self) -> int:
        return len(self.data) - self.pos

    def byte(self) -> int:
        if self.pos >= len(self.data):
            return 0
        self.pos += 1
        return self.data[self.pos - 1]

    def uint(self, nbytes: int) -> int:
        """An unsigned big-endian integer of `nbytes` bytes."""
        return int.from_bytes(self.take(nbytes).ljust(nbytes, b"\0"), "big")

    def below(self, n: int) -> int:
        """A number in [0, n)."""
        if n <= 1:
            return 0
        return self.uint(1 if n <= 256 else 2 if n <= 65536 else 4) % n

    def flag(self) -> bool:
        return bool(self.byte() & 1)

    def pick(self, options):
        return options[self.below(len(options))]

    def take(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + max(n, 0)]
        self.pos += len(out)
        return out

    def rest(self) -> bytes:
        return self.take(self.remaining)


def read_cuts(inp: Input, max_cuts: int = 7) -> list[int]:
    """A count byte, then that many 2-byte cut points (placed by `pieces`, modulo the length)."""
    count = inp.byte() % (max_cuts + 1)
    return [inp.uint(2) for _ in range(count)]


def pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    """`data` cut at the given points (each taken modulo len(data) + 1); empty pieces included."""
    bounds = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]
