"""rocketmq-rust's broker in a container: the image made from the binary `make peer-broker` built, and its command.

Tests: tests/unit/test_rust_image.py; tests/integration/test_rust_docker.py runs the image.

`images/build.sh rust` copies the binary (find_binary: on PATH, else the newest in the cache) onto the
project's base image as rmqha/rust:<hash>, labelled rmqha.rust-binary=<binary_hash(binary)>. The docker
backend looks the image up by that label, as apache_image does by the distribution's hash, so a rebuilt
binary is never run from a stale image. No other file is needed: the binary links only libc, libm,
libgcc_s and zlib, which the base image (Debian bookworm, as the build host) has.

Standard library only: build.sh runs `python3 -m rmqha.cluster.implementations.rust_image binary|hash`
with whatever python3 the host has.

In the container (compose/docker-compose.*.yml):
  /var/lib/rocketmq/node      the node's run folder RUN/nodes/NODE: broker.toml (rust.write_run_properties),
                              also its ROCKETMQ_HOME; the broker logs to stdout (docker logs)
  /var/lib/rocketmq/store     the store, as for ours
"""

from __future__ import annotations

import glob
import hashlib
import os
import shlex
import shutil
import sys

BINARY = "rocketmq-broker-rust"
CACHE = os.path.expanduser("~/.cache/rocketmq-ha-refcluster")
IMAGE_REPO = "rmqha/rust"
LABEL = "rmqha.rust-binary"
CONTAINER_NODE = "/var/lib/rocketmq/node"
CONFIG_NAME = "broker.toml"
# waits for the name server, then execs the broker (images/rust/rmqha-rust-broker): rocketmq-rust gives up
# its start when its first registration finds no name server, and compose starts services in order only
RUNNER = "/usr/local/bin/rmqha-rust-broker"


def find_binary() -> str | None:
    """rocketmq-broker-rust on PATH, else the newest one `make peer-broker` built into the cache."""
    found = shutil.which(BINARY)
    if found:
        return found
    builds = sorted(glob.glob(os.path.join(CACHE, "rocketmq-rust-*", "bin", BINARY)))
    return builds[-1] if builds else None


def binary_hash(path: str) -> str:
    """16 hex digits of sha256 over the binary's content."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


BUILD_HINT = "make images BROKER=rust (images/build.sh rust)"


def find_image(client, binary: str) -> str:
    """The tag of the image built from this binary. Raises LookupError naming the fix."""
    want = binary_hash(binary)
    found = client.images.list(filters={"label": f"{LABEL}={want}"})
    tags = sorted(t for img in found for t in img.tags if t.startswith(IMAGE_REPO + ":"))
    if not tags:
        raise LookupError(f"no {IMAGE_REPO} image of {binary} (content {want}): build it with {BUILD_HINT}")
    return tags[0]


def broker_command(namesrv: str) -> str:
    """The compose command of a broker container: the binary on the node's broker.toml."""
    return shlex.join([RUNNER, f"{CONTAINER_NODE}/{CONFIG_NAME}", namesrv])


def main(argv: list[str]) -> int:
    if argv == ["binary"]:
        found = find_binary()
        if not found:
            print(f"{BINARY} is not on PATH nor in {CACHE}: run `make peer-broker` first", file=sys.stderr)
            return 1
        print(found)
        return 0
    if len(argv) == 2 and argv[0] == "hash":
        print(binary_hash(argv[1]))
        return 0
    print("usage: python3 -m rmqha.cluster.implementations.rust_image binary | hash <file>", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
