"""The one launcher: a broker or name server as a detached process, and the signals sent to it.

    rec = spawn(broker_command(conf, overrides), log_path, child_env())   # {"pid", "pgid", "startTime", ...}
    is_running(rec); send_signal(rec, signal.SIGSTOP); stop(rec, timeout=10)

Each process runs in its own session (start_new_session), so it outlives its starter and a Ctrl-C in the
terminal does not reach it; its pid is also its process-group id. A record carries the pid with the
process's start time from /proc, so a recycled pid is never signalled. The local backend, the
integration tests' single brokers and the benchmarks all start processes through `spawn`.
"""

from __future__ import annotations

import datetime as _dt
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import ClusterError
from .topology import REPO_ROOT, set_args


def broker_command(
    conf: str | Path,
    overrides: dict | None = None,
    *,
    python_args: list[str] | None = None,
    extra_args: list[str] | None = None,
) -> list[str]:
    """`python -m rmqha.broker -c CONF --set k=v ...` (python_args go before -m, e.g. cProfile)."""
    return (
        [sys.executable, *(python_args or []), "-m", "rmqha.broker", "-c", str(conf)]
        + set_args({k: str(v) for k, v in (overrides or {}).items()})
        + list(extra_args or [])
    )


def namesrv_command(port: int, host: str = "127.0.0.1") -> list[str]:
    return [sys.executable, "-m", "rmqha.broker.namesrv", "--port", str(port), "--host", host]


def proxy_command(port: int, host: str, namesrv: str) -> list[str]:
    """The 5.x gRPC proxy (rmqha/proxy), in front of the cluster's name server."""
    return [sys.executable, "-m", "rmqha.proxy", "--namesrv", namesrv, "--listen", f"{host}:{port}"]


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a live pid, from /proc; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            data = fh.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = data[data.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def pid_alive(pid: int) -> bool:
    """The pid names a live process, ours or another user's; a zombie is gone for every purpose here."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    st = proc_stat(pid)
    return st is not None and st[0] != "Z"


def is_running(rec: dict | None) -> bool:
    """True when the process recorded in rec still runs (same pid, same start time, not a zombie)."""
    if not rec or not rec.get("pid"):
        return False
    st = proc_stat(rec["pid"])
    if st is None or st[0] in ("Z", "X"):
        _reap(rec["pid"])
        return False
    return rec.get("startTime") is None or st[1] == rec["startTime"]


def is_stopped(rec: dict | None) -> bool:
    """True when the process is frozen by SIGSTOP (state T)."""
    st = proc_stat(rec["pid"]) if rec and rec.get("pid") else None
    return bool(st) and st[0] == "T"


def _reap(pid: int) -> None:
    """Collect the exit status when the process is our child (in-process use, e.g. tests)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except (ChildProcessError, OSError):
        pass


def send_signal(rec: dict, sig: int) -> None:
    pid = rec["pid"]
    try:
        if rec.get("pgid") == pid and os.getpgid(pid) == pid:
            os.killpg(pid, sig)  # the session we created: the process and anything it forked
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


def wait_exit(rec: dict, timeout: float) -> bool:
    """Poll until the process is gone; True when it is."""
    deadline = time.monotonic() + timeout
    while is_running(rec):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def stop(rec: dict | None, timeout: float = 10.0, sig: int = signal.SIGTERM) -> str | None:
    """Stop a process: SIGCONT (a frozen one cannot handle SIGTERM), sig, SIGKILL after timeout.
    Returns a note when SIGKILL was needed, None otherwise."""
    if not is_running(rec):
        return None
    send_signal(rec, signal.SIGCONT)
    send_signal(rec, sig)
    if wait_exit(rec, timeout):
        return None
    send_signal(rec, signal.SIGKILL)
    wait_exit(rec, 5)
    return f"pid {rec['pid']} ignored {signal.Signals(sig).name} for {timeout:g}s; killed with SIGKILL"


def kill(rec: dict | None, timeout: float = 10.0) -> None:
    """SIGKILL, and wait until the process is gone."""
    if not is_running(rec):
        return
    send_signal(rec, signal.SIGKILL)
    if not wait_exit(rec, timeout):
        raise ClusterError(f"pid {rec['pid']} still runs {timeout:g}s after SIGKILL")


def spawn(cmd: list[str], log_path: Path, env: dict | None = None) -> dict:
    """Start cmd detached, stdout and stderr appended to log_path; returns its process record."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        stamp = _dt.datetime.now().isoformat(timespec="seconds")
        log.write(f"==== {stamp} cluster: starting {shlex.join(cmd)}\n".encode())
        log.flush()
        try:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO_ROOT,
                env=env if env is not None else child_env(),
                start_new_session=True,
                close_fds=True,
            )
        except OSError as e:
            raise ClusterError(f"cannot start {cmd[0]}: {e}") from e
    st = proc_stat(proc.pid)
    return {"pid": proc.pid, "pgid": proc.pid, "startTime": st[1] if st else None, "cmd": cmd, "log": str(log_path)}


def record(rec: dict) -> dict:
    """The JSON-safe part of a process record (what state.json keeps)."""
    return {k: v for k, v in rec.items() if not k.startswith("_")}


def child_env() -> dict:
    env = dict(os.environ)
    paths = [str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("NAMESRV_ADDR", None)  # namesrvAddr is always passed explicitly
    return env
