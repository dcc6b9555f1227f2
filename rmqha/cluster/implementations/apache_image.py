"""Apache RocketMQ 4.9.x in a container: the image made from the user's distribution, and its commands.

Tests: tests/unit/test_apache_image.py; tests/integration/test_apache_docker.py runs a distribution.

`images/build.sh apache` (ROCKETMQ_HOME=<dir>) copies the distribution's bin/, conf/ and lib/ into a build
context and builds rmqha/apache:<hash> on the project's base image plus Debian's openjdk-17-jre-headless,
labelled rmqha.distribution=<distribution_hash(home)>. The docker backend looks the image up by that label,
so a distribution rebuilt in place, or another one, is never run from a stale image; several distributions
can have an image each.

Standard library only: build.sh runs `python3 -m rmqha.cluster.implementations.apache_image hash DIR`
with whatever python3 the host has.

In the container (compose/docker-compose.*.yml):
  /opt/rocketmq               the distribution (ROCKETMQ_HOME)
  /var/lib/rocketmq/node      the node's run folder RUN/nodes/NODE (RUN/namesrv for the name server):
                              broker.properties (-c; updateBrokerConfig rewrites it there) and user.home,
                              where 4.9 logs (logs/rocketmqlogs/); a broker's rocketmq-home/ there is
                              its rocketmq.home.dir (apache.node_home: conf/ and the ACL file)
  /var/lib/rocketmq/store     the store, as for ours
"""

from __future__ import annotations

import hashlib
import shlex
import sys
from pathlib import Path

IMAGE_REPO = "rmqha/apache"
LABEL = "rmqha.distribution"
PARTS = ("bin", "conf", "lib")  # what the image carries of a distribution, and what its hash covers
CONTAINER_HOME = "/opt/rocketmq"
CONTAINER_NODE = "/var/lib/rocketmq/node"
NODE_HOME = "rocketmq-home"  # a broker's own rocketmq.home.dir in its node folder (apache.node_home)
# the distribution's scripts run java as a child of sh; this keeps the container until the JVM is gone
# and passes a docker stop's SIGTERM to it (images/apache/rmqha-run)
RUNNER = "/usr/local/bin/rmqha-run"
CONTAINER_JAVA_MAJOR = 17  # the image's JRE (Debian's openjdk-17-jre-headless)


def distribution_hash(home: str | Path) -> str:
    """16 hex digits of sha256 over every file's relative path and content under bin/, conf/ and lib/."""
    root = Path(home)
    h = hashlib.sha256()
    for part in PARTS:
        base = root / part
        files = sorted(p for p in base.rglob("*") if p.is_file()) if base.is_dir() else []
        for p in files:
            rel = p.relative_to(root).as_posix().encode()
            h.update(len(rel).to_bytes(4, "big") + rel)
            with open(p, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
            h.update(b"\0")
    return h.hexdigest()[:16]


def build_hint(home: str | Path) -> str:
    return f"make images BROKER=apache ROCKETMQ_HOME={home} (images/build.sh apache)"


def find_image(client, home: str | Path) -> str:
    """The tag of the image built from this distribution. Raises LookupError naming the fix."""
    want = distribution_hash(home)
    found = client.images.list(filters={"label": f"{LABEL}={want}"})
    tags = sorted(t for img in found for t in img.tags if t.startswith(IMAGE_REPO + ":"))
    if not tags:
        raise LookupError(
            f"no {IMAGE_REPO} image of the distribution at {home} (content {want}): build it with {build_hint(home)}"
        )
    return tags[0]


def broker_command(java_opt_ext: str) -> str:
    """The compose command of a broker container: the distribution's mqbroker on the node's properties."""
    opts = f"{java_opt_ext} -Drocketmq.home.dir={CONTAINER_NODE}/{NODE_HOME}"
    return _command(opts, "mqbroker", "-c", f"{CONTAINER_NODE}/broker.properties")


def namesrv_command(java_opt_ext: str) -> str:
    """The name server: 4.9's mqnamesrv on its default port, 9876 (the compose network's name server)."""
    return _command(java_opt_ext, "mqnamesrv")


def _command(java_opt_ext: str, script: str, *args: str) -> str:
    opts = f"{java_opt_ext} -Duser.home={CONTAINER_NODE}"
    return shlex.join(["env", f"JAVA_OPT_EXT={opts}", RUNNER, "sh", f"{CONTAINER_HOME}/bin/{script}", *args])


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "hash":
        print("usage: python3 -m rmqha.cluster.implementations.apache_image hash <ROCKETMQ_HOME>", file=sys.stderr)
        return 2
    home = Path(argv[1])
    missing = [p for p in PARTS if not (home / p).is_dir()]
    if missing:
        print(f"{home} is not an Apache RocketMQ binary distribution: no {', '.join(missing)}/", file=sys.stderr)
        return 1
    print(distribution_hash(home))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
