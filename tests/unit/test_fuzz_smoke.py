"""The fuzz harnesses (fuzz/, `make fuzz`) in a few seconds, without atheris: each target's seed corpus,
then seeded random inputs (random bytes, and seeds with bytes flipped, inserted, cut and spliced).
A failure names the input; `python -m fuzz.run --repro TARGET FILE` replays one saved to a file."""

import importlib
import random
from pathlib import Path

import pytest

from fuzz import TARGETS

CORPUS = Path(__file__).resolve().parents[2] / "fuzz" / "corpus"
RANDOM_INPUTS = 3000  # per target; all five together take a few seconds


def mutate(rng: random.Random, seeds: list[bytes]) -> bytes:
    data = bytearray(rng.choice(seeds))
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(5)
        at = rng.randint(0, len(data))
        if op == 0 and data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif op == 1:
            data[at:at] = rng.randbytes(rng.randint(1, 8))
        elif op == 2:
            del data[at : at + rng.randint(1, 16)]
        elif op == 3:
            other = rng.choice(seeds)
            cut = rng.randint(0, len(other))
            data[at:] = other[cut:]
        else:
            data[at:at] = rng.choice((b"\\ud800", b"9" * 40, b"[" * 1200, b"\xff\xff\xff\xff", b"\0" * 8))
    return bytes(data)


def inputs(target: str, seeds: list[bytes], count: int = RANDOM_INPUTS):
    rng = random.Random(target)
    yield from seeds
    for i in range(count):
        yield rng.randbytes(rng.randint(0, 300)) if i % 3 == 0 else mutate(rng, seeds)


@pytest.mark.parametrize("target", TARGETS)
def test_harness_holds_on_seeds_and_random_inputs(target):
    module = importlib.import_module(f"fuzz.{target}")
    seeds = [p.read_bytes() for p in sorted((CORPUS / target).iterdir())]
    assert seeds, f"no seed corpus in {CORPUS / target}: run python -m fuzz.seeds"
    for data in inputs(target, seeds, getattr(module, "SMOKE_INPUTS", RANDOM_INPUTS)):  # fewer for slow ones
        try:
            module.TestOneInput(data)
        except Exception as e:
            raise AssertionError(f"fuzz target {target} broke its contract on input {data!r}") from e
