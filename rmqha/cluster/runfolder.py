"""The run folder of a cluster: its root, its name, state.json and run/current. The layout inside it and
node.json are rmqha/runs/layout.py's, shared with the audit pipeline (rmqha/pipeline/runfolder.py reads it).

run/                              CLUSTER_RUN_ROOT, default <repo>/run (git-ignored)
  current                         the name of the cluster that status/logs/down act on
  <name>/                         RUN_DIR
    state.json                    what the backend started: topology, ports, pids, commands
    namesrv/namesrv.log           the name server's log (not under nodes/: the pipeline treats
                                  every folder under nodes/ as a broker)
    nodes/<node>/node.json        who the node is (rmqha/runs/layout.py)
    nodes/<node>/broker.log       the broker's stdout and stderr
    nodes/<node>/broker.properties  the file the broker runs on (-c): its topology's conf file with the
                                  deployment keys, written at `up`; updateBrokerConfig rewrites this copy,
                                  never the repository's compose/<topology>/<node>.properties
    nodes/<node>/store/           the broker's storePathRootDir (commitlog/, consumequeue/, ...)
    metrics/                      samples.jsonl from `python -m rmqha.cluster sample`
    history/                      client histories, written by the chaos kit
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from contextlib import contextmanager
from pathlib import Path

# the run folder's layout and node.json: rmqha/runs/layout.py (the backends use them as rf.node_dir, ...)
from rmqha.runs.layout import (  # noqa: F401
    broker_log,
    namesrv_log,
    node_dir,
    node_properties,
    node_record,
    proxy_log,
    store_dir,
    write_json_atomic,
    write_text_atomic,
)

from . import ClusterError
from .topology import IS_CHECKOUT, REPO_ROOT

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
DEFAULT_NAME = "default"


_env_lock = threading.Lock()


@contextmanager
def using_run_root(path) -> None:
    """CLUSTER_RUN_ROOT set to `path` for the duration (a cluster start reads it then, never after), then put
    back as it was; the developer's own run/ is left alone. None: nothing changes."""
    if path is None:
        yield
        return
    with _env_lock:
        saved = os.environ.get("CLUSTER_RUN_ROOT")
        os.environ["CLUSTER_RUN_ROOT"] = str(path)
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop("CLUSTER_RUN_ROOT", None)
            else:
                os.environ["CLUSTER_RUN_ROOT"] = saved


def run_root() -> Path:
    """CLUSTER_RUN_ROOT, else run/ in the checkout, else (an installed package) run/ where it is used."""
    if os.environ.get("CLUSTER_RUN_ROOT"):
        return Path(os.environ["CLUSTER_RUN_ROOT"])
    return (REPO_ROOT if IS_CHECKOUT else Path.cwd()) / "run"


def check_name(name: str) -> str:
    if not _NAME.match(name or ""):
        raise ClusterError(
            f"bad cluster name {name!r}: use letters, digits, '.', '_' or '-' (it becomes a folder under run/)"
        )
    return name


def run_dir(name: str) -> Path:
    return run_root() / check_name(name)


def write_node_properties(rd: Path, node: str, props: dict[str, str], header: str) -> Path:
    """Write a broker's properties into its run folder (node_properties), atomically, and return the path:
    the one place every broker implementation's node file is written (ours and Apache's read it with -c,
    and an updateBrokerConfig rewrites it there). Keys sorted; java.util.Properties text in ASCII, anything
    else as \\uXXXX, so a JVM (which reads the file as ISO-8859-1) and our parser read the same values."""
    lines = [f"# {line}" for line in header.splitlines()]
    lines += [f"{_escape_property(k, key=True)}={_escape_property(str(v))}" for k, v in sorted(props.items())]
    path = node_properties(rd, node)
    write_text_atomic(path, "\n".join(lines) + "\n", encoding="ascii")
    return path


_PROPERTY_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}


def _escape_property(text: str, key: bool = False) -> str:
    """java.util.Properties.store's escaping: backslash, control characters, a leading space (every space
    in a key), the separators and comment marks in a key; non-ASCII as \\uXXXX (UTF-16 units)."""
    out = []
    for i, ch in enumerate(text):
        if ch in _PROPERTY_ESCAPES:
            out.append(_PROPERTY_ESCAPES[ch])
        elif ch == " " and (key or i == 0):
            out.append("\\ ")
        elif key and ch in "=:#!":
            out.append("\\" + ch)
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            units = ch.encode("utf-16-be", "surrogatepass")
            out.extend(f"\\u{int.from_bytes(units[j : j + 2], 'big'):04x}" for j in range(0, len(units), 2))
    return "".join(out)


def read_state(rd: Path) -> dict | None:
    path = rd / "state.json"
    try:
        with open(path) as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ClusterError(f"cannot read {path}: {e}; remove it if no cluster is running there") from e


def write_state(rd: Path, state: dict) -> None:
    write_json_atomic(rd / "state.json", state)


def set_current(name: str) -> None:
    root = run_root()
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / ".current.tmp"
    tmp.write_text(name + "\n")
    os.replace(tmp, root / "current")


def get_current() -> str | None:
    try:
        name = (run_root() / "current").read_text().strip()
    except FileNotFoundError:
        return None
    return name or None


def resolve(name: str | None) -> tuple[str, Path, dict]:
    """The cluster a command acts on: --name, else run/current. Its state must exist."""
    if name is None:
        name = get_current()
        if name is None:
            raise ClusterError(
                f"no current cluster ({run_root() / 'current'} does not exist): start one with "
                "`python -m rmqha.cluster up --topology 2m-2s-sync --backend local`, or pass --name"
            )
    rd = run_dir(name)
    state = read_state(rd)
    if state is None:
        known = list_clusters()
        raise ClusterError(
            f"cluster {name!r} has no state in {rd}"
            + (f" (known: {', '.join(known)})" if known else "")
            + "; start it with `python -m rmqha.cluster up --name "
            + name
            + " ...`"
        )
    return name, rd, state


def list_clusters() -> list[str]:
    root = run_root()
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir() if (d / "state.json").is_file())


def tail(path: Path, n: int) -> list[str]:
    """The last n lines of a text file (reads at most the last 1 MiB)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - (1 << 20)))
            data = fh.read()
    except FileNotFoundError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[-n:] if n > 0 else []


def prepare(rd: Path, node_names: list[str], topology: str, old_state: dict | None, fresh: bool) -> None:
    """Create the run folder for a topology. Node folders of another topology would be read by the
    audit as part of this run: refuse them, or remove them with fresh."""
    nodes_dir = rd / "nodes"
    stale = (
        sorted(d.name for d in nodes_dir.iterdir() if d.is_dir() and d.name not in set(node_names))
        if nodes_dir.is_dir()
        else []
    )
    if stale and not fresh:
        earlier = old_state.get("topology") if old_state else "another topology"
        raise ClusterError(
            f"{nodes_dir} holds {', '.join(stale)}, which topology {topology} does not "
            f"have (left by an earlier run of {earlier}); "
            "add --fresh to remove them and every kept store, or use another --name"
        )
    for d in stale:
        shutil.rmtree(nodes_dir / d)
    rd.mkdir(parents=True, exist_ok=True)
    (rd / "metrics").mkdir(exist_ok=True)
