"""The send path's C accelerator (rmqha/broker/fastpath/_fastsend.c) fuzzed under AddressSanitizer and UBSan.

atheris guides `make fuzz` by Python coverage and cannot see an out-of-bounds read in C that does not
crash. Here the module is rebuilt with -fsanitize=address,undefined into build/fuzz/native/ and the
send_fastpath harness (fuzz/send_fastpath.py: the scan and the encoder against the Python path) runs in
a child process with the sanitizer runtimes preloaded, each stream in memory that ends at an unreadable
page (a read one byte past it faults), over the seed corpus, what libFuzzer kept
(build/fuzz/send_fastpath/corpus), mutations of both, and random structured streams. Any sanitizer
report aborts the child: the run fails and prints the report.

    python -m fuzz.native [--seconds 60] [--inputs N]     # make fuzz-native
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "rmqha" / "broker" / "fastpath" / "_fastsend.c"
OUT = ROOT / "build" / "fuzz" / "native"
SANITIZERS = ("libasan.so", "libubsan.so")


class Unavailable(Exception):
    """No C compiler, no Python headers or no sanitizer runtime here."""


def runtimes() -> list[str]:
    libs = []
    for name in SANITIZERS:
        try:
            path = subprocess.run(
                ["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError) as e:
            raise Unavailable(f"gcc is not usable: {e}") from None
        if not os.path.isabs(path):  # gcc echoes the bare name when it has no such library
            raise Unavailable(f"{name} is not installed (Debian: apt-get install gcc, which brings libasan)")
        libs.append(path)
    return libs


def build() -> Path:
    """The sanitized module (rebuilt when the source is newer)."""
    OUT.mkdir(parents=True, exist_ok=True)
    target = OUT / ("_fastsend" + sysconfig.get_config_var("EXT_SUFFIX"))
    if target.exists() and target.stat().st_mtime >= SOURCE.stat().st_mtime:
        return target
    include = sysconfig.get_paths()["include"]
    cmd = [
        "gcc",
        "-O1",
        "-g",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-fsanitize=address,undefined",
        "-fno-sanitize-recover=undefined",
        "-fno-omit-frame-pointer",
        "-shared",
        "-fPIC",
        f"-I{include}",
        str(SOURCE),
        "-lz",
        "-o",
        str(target),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise Unavailable(f"building the sanitized module failed:\n{r.stderr[-2000:]}")
    return target


def load(path: str):
    spec = importlib.util.spec_from_file_location("_fastsend", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _inputs(rng: random.Random, seeds: list[bytes]):
    yield from seeds
    while True:
        kind = rng.random()
        if kind < 0.45 and seeds:
            data = bytearray(rng.choice(seeds))
            for _ in range(rng.randint(1, 6)):
                at = rng.randint(0, len(data))
                op = rng.random()
                if op < 0.5 and data:
                    data[min(at, len(data) - 1)] = rng.randrange(256)
                elif op < 0.75:
                    data[at:at] = rng.choice(
                        (
                            b"\\u0001",
                            b"\\u0002",
                            b'"',
                            b"\\",
                            b"\\ud800",
                            b"9" * 25,
                            b"-0",
                            b"\xed\xa0\x80",
                            b"\xf4\x90\x80\x80",
                            bytes([rng.randrange(256)]),
                        )
                    )
                else:
                    del data[at : at + rng.randint(1, 12)]
            yield bytes(data)
        else:  # the harness's structured streams, from random choices
            yield bytes([rng.randrange(1, 4)]) + rng.randbytes(rng.randint(16, 600))


def guarded(data: bytes) -> memoryview:
    """data in anonymous memory that ends exactly where an unreadable page begins: a read past its
    end faults at once, even where ASan's redzones would not reach (a buffer's spare capacity)."""
    import ctypes
    import mmap

    page = mmap.PAGESIZE
    pages = (len(data) + page - 1) // page + 1
    m = mmap.mmap(-1, pages * page)
    start = (pages - 1) * page - len(data)
    m[start : start + len(data)] = data
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    if ctypes.CDLL(None, use_errno=True).mprotect(ctypes.c_void_p(base + (pages - 1) * page), page, 0) != 0:
        raise OSError(ctypes.get_errno(), "mprotect failed")
    return memoryview(m)[start : start + len(data)]


def child(seconds: float, limit: int, seed: int) -> None:
    from rmqha.broker import fastpath

    fastpath.native = load(os.environ["RMQHA_NATIVE_MODULE"])
    from fuzz import send_fastpath

    send_fastpath.BUFFER = guarded
    seeds = []
    for folder in (ROOT / "fuzz" / "corpus" / "send_fastpath", ROOT / "build" / "fuzz" / "send_fastpath" / "corpus"):
        if folder.is_dir():
            seeds += [p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()]
    rng = random.Random(seed)
    deadline = time.monotonic() + seconds
    done = taken = 0
    for data in _inputs(rng, seeds):
        if done >= limit or time.monotonic() > deadline:
            break
        send_fastpath.TestOneInput(data)
        done += 1
    # how much of that reached the accepting paths (a run that only ever rejects proves little)
    for data in seeds:
        buf = bytearray(data[1:])
        taken += len(
            fastpath.native.scan_sends(
                buf, 0, len(buf), send_fastpath.MAX_FRAME, send_fastpath.MAX_HEADER, send_fastpath.CLUSTER, 64
            )[0]
        )
    print(
        f"native fuzz: {done} inputs, {len(seeds)} corpus entries ({taken} sends taken from them), no sanitizer report",
        flush=True,
    )


def run(seconds: float, limit: int, seed: int = 1) -> subprocess.CompletedProcess:
    """Build, then fuzz in a child with the sanitizer runtimes preloaded; raises Unavailable."""
    libs = runtimes()
    module = build()
    env = dict(
        os.environ,
        LD_PRELOAD=" ".join(libs),
        PYTHONMALLOC="malloc",
        RMQHA_NATIVE_MODULE=str(module),
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1",
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
    )
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "fuzz.native",
            "--child",
            "--seconds",
            str(seconds),
            "--inputs",
            str(limit),
            "--seed",
            str(seed),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--inputs", type=int, default=10**9, help="stop after this many inputs")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.seconds, args.inputs, args.seed)
        return 0
    print(
        f"==> building {SOURCE.relative_to(ROOT)} with AddressSanitizer and UBSan, then fuzzing it for "
        f"{args.seconds:.0f} s (seed {args.seed})",
        flush=True,
    )
    try:
        r = run(args.seconds, args.inputs, args.seed)
    except Unavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        sys.stderr.write(r.stderr[-20000:])
        print(
            f"FAILED: the sanitized run exited with {r.returncode} (the report is above; seed {args.seed} replays it)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
