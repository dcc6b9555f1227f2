"""The broker implementation a cluster runs: ours, Apache RocketMQ 4.9.x, or rocketmq-rust's.

Tests: tests/unit/test_implementations.py (and tests/integration/test_apache_broker.py with a distribution).

    choice = parse_choice("apache", home="/opt/rocketmq-4.9.8")    # every broker and the name server
    choice = parse_choice("ours,broker-a-s=apache", home=...)      # a mixed group: their slave of our master
    choice.of("broker-a-s")  -> "apache"; choice.namesrv -> "ours"
    implementation("apache").broker_launch(node, run_dir, choice)  -> Launch(cmd, env)

Each implementation is one small module with its start commands, the properties it is given and how its
status is read. The backends call these and nothing else; the status table, the waits, the sampler and the
faults read an Apache (or Rust) broker only through what every 4.9 broker serves (runtime_status.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .. import ClusterError

KINDS = ("ours", "apache", "rust")
DEFAULT = "ours"


@dataclass(frozen=True)
class BrokerChoice:
    """Which implementation runs each node; `home` is the Apache distribution (ROCKETMQ_HOME)."""

    default: str = DEFAULT
    per_node: dict = field(default_factory=dict)
    namesrv: str = DEFAULT
    home: str | None = None

    def of(self, node: str) -> str:
        return "ours" if node == "namesrv" and self.namesrv == "ours" else self.per_node.get(node, self.default)

    @property
    def kinds(self) -> set[str]:
        return {self.default, self.namesrv, *self.per_node.values()}

    def spec(self) -> str:
        """The string form parse_choice reads back (what state.json keeps)."""
        parts = [self.default] + [f"{n}={k}" for n, k in sorted(self.per_node.items())]
        if self.namesrv != self.default:
            parts.append(f"namesrv={self.namesrv}")
        return ",".join(parts)


def _kind(value: str, where: str) -> str:
    v = value.strip().lower()
    if v == "4.9":  # the matrix's name for a real 4.9 broker is "apache"; "4.9" there is our emulation
        raise ClusterError(f"{where}: {value!r} is the matrix's emulation mode of our broker; the real one is 'apache'")
    if v not in KINDS:
        raise ClusterError(f"{where}: unknown broker {value!r}: choose one of {', '.join(KINDS)}")
    return v


def parse_choice(
    spec: str | None, *, home: str | None = None, namesrv: str | None = None, nodes: list[str] | None = None
) -> BrokerChoice:
    """`apache`, `ours,broker-a-s=apache` or `apache,namesrv=ours`. The name server is the default
    broker's kind unless named; home defaults to $ROCKETMQ_HOME. nodes (when given) validates node names."""
    spec = (spec or DEFAULT).strip() or DEFAULT
    default, per_node, ns = DEFAULT, {}, None
    for i, part in enumerate(p.strip() for p in spec.split(",")):
        if not part:
            continue
        node, eq, kind = part.partition("=")
        if not eq:
            if i:
                raise ClusterError(f"broker {spec!r}: only the first item may be a bare kind, got {part!r}")
            default = _kind(part, "broker")
            continue
        node = node.strip()
        if node == "namesrv":
            ns = _kind(kind, f"broker {spec!r}")
            if ns == "rust":
                raise ClusterError("namesrv=rust: rocketmq-rust's name server is not wired; use ours or apache")
            continue
        if nodes is not None and node not in nodes:
            raise ClusterError(f"broker {spec!r}: no node {node!r} (nodes: {', '.join(nodes)})")
        per_node[node] = _kind(kind, f"broker {spec!r}")
    if namesrv:
        ns = _kind(namesrv, "namesrv")
    if ns is None:
        ns = default if default != "rust" else "ours"
    home = home or os.environ.get("ROCKETMQ_HOME") or None
    return BrokerChoice(default, per_node, ns, str(Path(home).resolve()) if home else None)


def implementation(kind: str):
    """The module that starts and reads brokers of this kind."""
    if kind == "ours":
        from . import ours

        return ours
    if kind == "apache":
        from . import apache

        return apache
    if kind == "rust":
        from . import rust

        return rust
    raise ClusterError(f"unknown broker {kind!r}: choose one of {', '.join(KINDS)}")


def check_available(choice: BrokerChoice) -> None:
    """Raise ClusterError naming the fix when a chosen implementation cannot start here."""
    for kind in sorted(choice.kinds):
        implementation(kind).check_available(choice)


def official_client_refusal(choice: BrokerChoice) -> str | None:
    """Why the official C++ client (PyPI rocketmq 0.4.4) cannot be this cluster's client, or None: a node
    it would talk to runs a broker that does not take its requests (rust.OFFICIAL_CLIENT_REFUSED)."""
    rust_nodes = sorted(n for n, k in choice.per_node.items() if k == "rust")
    if choice.default != "rust" and not rust_nodes:
        return None
    from .rust import OFFICIAL_CLIENT_REFUSED

    where = "" if choice.default == "rust" else f" (nodes {', '.join(rust_nodes)})"
    return f"rocketmq-rust's broker{where}: {OFFICIAL_CLIENT_REFUSED}"


def unavailable_reason(choice: BrokerChoice) -> str | None:
    try:
        check_available(choice)
    except ClusterError as e:
        return str(e)
    return None


@dataclass(frozen=True)
class Launch:
    cmd: list
    env: dict


def broker_options(prefix: str = "--") -> list[tuple[str, dict]]:
    """The options that choose the broker implementation, as (flag, argparse keywords): --broker and
    --rocketmq-home for the cluster CLI and chaos runs, --rocketmq-broker and --rocketmq-home for the
    pytest plugin (prefix "--rocketmq-")."""
    return [
        (
            f"{prefix}broker",
            {
                "default": os.environ.get("BROKER") or DEFAULT,
                "help": "which broker runs each node: ours (default), apache (a 4.9.x binary distribution, "
                "--rocketmq-home), rust (`make peer-broker`); mixed: ours,broker-a-s=apache; the name "
                "server: ...,namesrv=ours",
            },
        ),
        (
            "--rocketmq-home",
            {
                "default": os.environ.get("ROCKETMQ_HOME") or None,
                "help": "Apache RocketMQ's binary distribution (bin/mqbroker, lib/, conf/) for broker apache "
                "(default $ROCKETMQ_HOME)",
            },
        ),
    ]


def add_arguments(p) -> None:
    """--broker and --rocketmq-home on an argparse parser (the cluster CLI and chaos runs)."""
    for flag, keywords in broker_options():
        p.add_argument(flag, **keywords)
