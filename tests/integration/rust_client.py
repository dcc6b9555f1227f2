"""The second client: clients/rust (a CLI on crates.io `rocketmq-client-rust`), driven from the tests.

    rc = RustClient.get()                      # the built binary, or skip/fail (see below)
    rc.send(ns, topic, mode="sync", count=5)   # -> one dict per result line
    rc.consume(ns, topic, group, mode="push", expect=5)
    rc.offsets(ns, topic, group)
    rc.tx_send(ns, topic, messages=[{"body": "b", "tx": "check-commit"}])  # transactions, check-backs
    rc.query(ns, topic, key="k") / rc.query(ns, topic, msg_id=offset_msg_id)  # the message index
    rc.admin(ns, "topic", "route", topic="T")  # the crate's admin API (DefaultMQAdminExt), one call

`make rust-client` builds the binary in release mode into clients/rust/target. `make test` starts that
build in the background when it is not cached (clients/rust/build.sh --background), so the Python tiers
run while it compiles; `get()` then waits for the build recorded in build/rust-client.pid, and
tests/conftest.py hands the files that use the client out last. RUST_CLIENT_BIN=<path> points at another
binary. When the binary is missing (and no build is running) the tests FAIL with the build command to
run, unless RUST_CLIENT=skip, which makes them skip. Tests get the client from the `rc` fixture
(tests/integration/conftest.py), so tests/conftest.py knows which tests need it: they wait for the
build before their timeout starts.

Each call runs one process with a deadline and parses its JSON lines (the client logs to stderr). A
process that exits non-zero, prints a {"fatal": ...} line or outlives its deadline raises
RustClientError carrying the command line and the tail of its stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BIN = ROOT / "clients" / "rust" / "target" / "release" / "rmq-rust-client"
BUILD_PID = ROOT / "build" / "rust-client.pid"
BUILD_LOG = ROOT / "build" / "rust-client.log"
BUILD_WAIT_S = 45 * 60  # a cold build of ~360 crates on 2 cores under a loaded test run


def background_build_pid() -> int | None:
    """The pid of a running `clients/rust/build.sh --background` build, or None."""
    try:
        pid = int(BUILD_PID.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def wait_for_background_build(deadline_s: float = BUILD_WAIT_S, say: Callable[[str], None] | None = None) -> None:
    """Block until the background build (if any) ends, saying so every minute (`say`, or stderr)."""
    say = say or (lambda line: sys.stderr.write(line + "\n"))
    started = time.monotonic()
    last_said = started - 60
    while (pid := background_build_pid()) is not None:
        now = time.monotonic()
        if now - started > deadline_s:
            raise RustClientError(
                f"the rust client build (pid {pid}) is still running after {deadline_s:g} s: see {BUILD_LOG}"
            )
        if now - last_said >= 60:
            say(f"waiting for the rust client build (pid {pid}, log {BUILD_LOG}, {now - started:.0f} s so far)")
            last_said = now
        time.sleep(1)


class RustClientError(AssertionError):
    pass


class RustClient:
    def __init__(self, binary: Path):
        self.binary = Path(binary)

    @classmethod
    def get(cls) -> "RustClient":
        binary = Path(os.environ.get("RUST_CLIENT_BIN") or DEFAULT_BIN)
        if not os.access(binary, os.X_OK):
            wait_for_background_build()
        if not os.access(binary, os.X_OK):
            msg = f"rust client binary {binary} not built: run `make rust-client`"
            if BUILD_LOG.exists():
                msg += f" (the background build's log: {BUILD_LOG})"
            if os.environ.get("RUST_CLIENT", "").lower() == "skip":
                pytest.skip(msg + " (skipped: RUST_CLIENT=skip)")
            raise RustClientError(msg + " (or set RUST_CLIENT=skip to skip these tests)")
        return cls(binary)

    # -- running ----------------------------------------------------------------------------------
    def run(
        self,
        namesrv: str,
        command: str,
        *args: str,
        stdin: str | None = None,
        timeout: float = 60.0,
        check: bool = True,
    ) -> list[dict]:
        argv = [str(self.binary), "--namesrv", namesrv, command, *[str(a) for a in args]]
        env = dict(os.environ)
        env.setdefault("RMQ_CLIENT_LOG", "warn")
        try:
            p = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired as e:
            raise RustClientError(
                f"{' '.join(argv)}: no exit within {timeout:g} s\nstdout:\n"
                f"{_tail(e.stdout)}\nstderr:\n{_tail(e.stderr)}"
            ) from None
        lines = []
        for line in p.stdout.splitlines():
            if line.startswith("{"):
                try:
                    lines.append(json.loads(line))
                except ValueError:
                    pass
        fatal = [l["fatal"] for l in lines if "fatal" in l]
        if check and (p.returncode != 0 or fatal):
            raise RustClientError(f"{' '.join(argv)}: exit {p.returncode} {fatal}\nstderr:\n{_tail(p.stderr)}")
        self.last_stderr = p.stderr
        return lines

    # -- commands ---------------------------------------------------------------------------------
    def send(
        self,
        namesrv: str,
        topic: str,
        *,
        mode: str = "sync",
        count: int = 1,
        prefix: str = "rust",
        tags: str | None = None,
        size: int = 0,
        messages: list[dict] | None = None,
        queue: int | None = None,
        broker: str | None = None,
        timeout_ms: int = 3000,
        retries: int | None = None,
        group: str | None = None,
        timeout: float = 60.0,
    ) -> list[dict]:
        """One result dict per message (one for a batch): status name or error, msgId, queue, offset, ms.
        `messages` ([{body, tags, keys, props}]) replaces count/prefix/tags/size."""
        args = ["--topic", topic, "--mode", mode, "--timeout-ms", timeout_ms]
        stdin = None
        if messages is not None:
            args.append("--stdin")
            stdin = "".join(json.dumps(m) + "\n" for m in messages)
        else:
            args += ["--count", count, "--prefix", prefix, "--size", size]
            if tags:
                args += ["--tags", tags]
        for flag, val in (("--queue", queue), ("--broker", broker), ("--retries", retries), ("--group", group)):
            if val is not None:
                args += [flag, val]
        return [l for l in self.run(namesrv, "send", *args, stdin=stdin, timeout=timeout) if "mode" in l]

    def consume(
        self,
        namesrv: str,
        topic: str,
        group: str,
        *,
        mode: str = "push",
        expect: int | None = None,
        timeout_s: float = 30.0,
        expr: str = "*",
        reconsume_later: bool = False,
        linger_ms: int = 500,
    ) -> tuple[list[dict], dict]:
        """(every delivery, the final {"done": true, ...} line). Deliveries answered RECONSUME_LATER
        carry "action": "RECONSUME_LATER"; the others "CONSUME_SUCCESS"."""
        args = [
            "--topic",
            topic,
            "--group",
            group,
            "--mode",
            mode,
            "--timeout-s",
            timeout_s,
            "--expr",
            expr,
            "--linger-ms",
            linger_ms,
        ]
        if expect is not None:
            args += ["--expect", expect]
        if reconsume_later:
            args.append("--reconsume-later")
        lines = self.run(namesrv, "consume", *args, timeout=timeout_s + 30)
        done = next((l for l in lines if l.get("done")), {})
        self.last_warnings = [l["warn"] for l in lines if "warn" in l]
        return [l for l in lines if "body" in l], done

    def offsets(self, namesrv: str, topic: str, group: str | None = None) -> list[dict]:
        args = ["--topic", topic] + (["--group", group] if group else [])
        return self.run(namesrv, "offsets", *args, timeout=60)

    def tx_send(
        self,
        namesrv: str,
        topic: str,
        *,
        tx: str = "commit",
        count: int = 1,
        prefix: str = "tx",
        messages: list[dict] | None = None,
        unknown_checks: int = 0,
        expect_checks: int = 0,
        wait_s: float = 30.0,
        linger_ms: int = 500,
        group: str | None = None,
        timeout_ms: int = 3000,
    ) -> tuple[list[dict], list[dict], dict]:
        """Transactional sends (src/tx.rs): (one result per message, every check-back the listener answered,
        the final {"done": true, ...} line). `tx` is a comma-separated list of modes (commit, rollback,
        check-commit, check-rollback, unknown) cycled over the messages; `messages` ([{body, tags, keys,
        props, tx}]) replaces count/prefix, and a line's "tx" overrides `tx`. A check is answered UNKNOW
        `unknown_checks` times first."""
        args = [
            "--topic",
            topic,
            "--tx",
            tx,
            "--unknown-checks",
            unknown_checks,
            "--expect-checks",
            expect_checks,
            "--wait-s",
            wait_s,
            "--linger-ms",
            linger_ms,
            "--timeout-ms",
            timeout_ms,
        ]
        stdin = None
        if messages is not None:
            args.append("--stdin")
            stdin = "".join(json.dumps(m) + "\n" for m in messages)
        else:
            args += ["--count", count, "--prefix", prefix]
        if group:
            args += ["--group", group]
        lines = self.run(namesrv, "tx-send", *args, stdin=stdin, timeout=wait_s + 60)
        done = next((l for l in lines if l.get("done")), {})
        return [l for l in lines if "tx" in l and "check" not in l], [l for l in lines if "check" in l], done

    def query(
        self,
        namesrv: str,
        topic: str,
        *,
        key: str | None = None,
        msg_id: str | None = None,
        begin_ms: int | None = None,
        end_ms: int | None = None,
        max_num: int | None = None,
    ) -> tuple[list[dict], dict]:
        """The message index (src/query.rs): by key (QUERY_MESSAGE within [begin_ms, end_ms]) or by an
        offsetMsgId (VIEW_MESSAGE_BY_ID). (the messages found, the final {"done": true, "found": N, ...}
        line; it carries the client's "error" when nothing was found)."""
        args = ["--topic", topic] + (["--key", key] if key is not None else ["--id", msg_id])
        for flag, val in (("--begin-ms", begin_ms), ("--end-ms", end_ms), ("--max", max_num)):
            if val is not None:
                args += [flag, val]
        lines = self.run(namesrv, "query", *args, timeout=60)
        done = next((l for l in lines if l.get("done")), {})
        return [l for l in lines if "body" in l], done

    def admin(self, namesrv: str, *words: str, check: bool = True, timeout: float = 60.0, **opts) -> dict:
        """One admin call (src/admin.rs: the crate's DefaultMQAdminExt): `words` are the area and action
        (e.g. "topic", "create"); each option `name_x=v` becomes `--name-x v` (True: a bare flag; a dict: its
        JSON). The call's one JSON object; a failed call (exit 3) carries "error", "errorCode",
        "errorMessage", "causes" and raises RustClientError unless check=False."""
        args: list[str] = list(words)
        for name, val in opts.items():
            if val is None or val is False:
                continue
            args.append("--" + name.replace("_", "-"))
            if val is not True:
                args.append(json.dumps(val) if isinstance(val, dict) else str(val))
        lines = self.run(namesrv, "admin", *args, timeout=timeout, check=False)
        out = lines[-1] if lines else {"error": f"no output; stderr:\n{_tail(self.last_stderr)}"}
        if check and ("error" in out or "fatal" in out):
            raise RustClientError(f"admin {' '.join(args)}: {out}")
        return out


def queue_key(key: str) -> tuple[str, int]:
    """(brokerName, queueId) of a MessageQueue map key as the crate encodes one (a JSON object as text)."""
    q = json.loads(key)
    return q["brokerName"], q["queueId"]


def _tail(text, n: int = 4000) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return (text or "")[-n:]
