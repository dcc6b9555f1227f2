"""The audit pipeline on a real cluster run: a local 2m-2s-sync cluster, the official client recording
its history, `make audit`'s job on what the run left behind; then a damaged replica is caught."""

import subprocess
import sys
import textwrap

import pytest

from rmqha.cluster.wait import wait_until

from .cluster_cli import REPO, cli, cli_cluster

pytestmark = [pytest.mark.integration, pytest.mark.audit_scenarios, pytest.mark.timeout(400)]

WORKLOAD = textwrap.dedent("""
    import sys, time
    from rmqha.runs.recorder import HistoryRecorder, status_name
    run, namesrv, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    prod = HistoryRecorder(run + "/history/producer.jsonl", client="producer")
    p = prod.producer("AuditPG", namesrv=namesrv, timeout_ms=10000)
    acked = set()  # SEND_OK answers: what the audit owes the consumer group
    for i in range(n):
        for attempt in (1, 2, 3):  # the client's occasional transport race: retry the same send_id
            try:
                res = prod.send(p, "TopicAudit", f"message {i}".encode() * 20, send_id=f"s{i}", attempt=attempt,
                                tags="TagA")
                if status_name(res.status) == "SEND_OK":
                    acked.add(f"s{i}")
                break
            except Exception:
                time.sleep(0.2)
    p.shutdown()
    prod.close()
    cons = HistoryRecorder(run + "/history/consumer.jsonl", client="consumer")
    seen = set()
    _text = lambda k: k.decode() if isinstance(k, bytes) else k  # the client hands keys as bytes
    for wait_s in (60, 30, 30):  # another consumer when the 1.0.1 client's pull of a queue stalled (its race)
        c = cons.push_consumer("AuditCG", "TopicAudit", namesrv=namesrv, on_message=lambda m: seen.add(_text(m.keys)))
        deadline = time.time() + wait_s
        while not acked <= seen and time.time() < deadline:
            time.sleep(0.1)
        c.shutdown()
        if acked <= seen:
            break
    cons.close()
    print("acknowledged", len(acked), "received", len(seen))
    print("missing", " ".join(sorted(acked - seen)))
""")


def test_audit_of_a_real_run_passes_then_catches_a_damaged_replica(tmp_path):
    _, base, env, run_dir = cli_cluster(tmp_path, "2m-2s-sync", "audit")
    up = cli(
        env,
        "up",
        "--topology",
        "2m-2s-sync",
        "--backend",
        "local",
        "--name",
        "audit",
        "--base-port",
        str(base),
        "--timeout",
        "40",
        "--set",
        "syncFlushTimeout=1500",
        # 64 MiB commit-log files, as chaos runs use: the audit reads preallocated files whole
        "--set",
        f"mappedFileSizeCommitLog={64 << 20}",
    )
    assert up.returncode == 0, up.stderr + up.stdout
    try:
        # The three outcomes on demand first: their FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE sends are in
        # the history too, and the audit must not count them as acknowledged.
        outcomes = subprocess.run(
            [sys.executable, "-m", "rmqha.chaos.outcomes", "--name", "audit"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert outcomes.returncode == 0, outcomes.stdout + outcomes.stderr[-3000:]
        assert "every outcome as expected" in outcomes.stdout
        namesrv = f"127.0.0.1:{base + 47}"
        work = subprocess.run(
            [sys.executable, "-c", WORKLOAD, str(run_dir), namesrv, "40"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert work.returncode == 0, work.stderr[-3000:]
        acked, missing = _acked_and_missing(work.stdout)
        # A send the client failed three times is not owed; every acknowledged one is, and most must be.
        assert acked >= 30 and not missing, work.stdout + _sends_of(run_dir, missing) + work.stderr[-2000:]
        # Every slave holds what its master holds before the run is closed.
        wait_until(lambda: cli(env, "wait", "--timeout", "5").returncode == 0, 30, "the slaves to catch up")
    finally:
        down = cli(env, "down", "--keep-data")
        assert down.returncode == 0, down.stderr

    # Both audits through one `python -m rmqha.pipeline --serve` (rmqha.chaos.matrix's auditor): one JVM start, and the
    # serve loop on a real run (the single-run command is tests/unit/pipeline/test_audit.py's CLI test).
    out = tmp_path / "report"
    log = open(tmp_path / "auditor.log", "w")  # Spark's log: a file, never a pipe nobody reads
    auditor = subprocess.Popen(
        [sys.executable, "-m", "rmqha.pipeline", "--serve"],
        cwd=REPO,
        env=env,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
    )
    try:
        not_a_run = tmp_path / "empty"
        not_a_run.mkdir()
        answer = ask(auditor, f"{not_a_run}\n")  # a bad line is an error for that line only
        assert answer["run"] == str(not_a_run) and "not a run folder" in answer["error"], answer
        answer = ask(auditor, f"{run_dir}\t{out}\n")
        verdicts = "\n".join(answer.get("verdicts", []))
        assert answer.get("failed") is False and answer["out"] == str(out), answer
        assert "FAIL" not in verdicts, verdicts
        report = (out / "report.md").read_text()
        assert list(out.glob("*.png")), "no plots written"
        assert "broker-a" in report
        assert "FLUSH_SLAVE_TIMEOUT 1" in verdicts and "SLAVE_NOT_AVAILABLE 1" in verdicts, verdicts
        assert "PASS  unconfirmed sends stored on the master: all 2 are stored" in verdicts, verdicts

        # Flip one byte inside the first record of a slave's commit log: the audit must name it.
        slave_log = next((run_dir / "nodes").glob("broker-*-s/store/commitlog/*"))
        data = bytearray(slave_log.read_bytes()[:4096])
        assert data[4:8] == bytes.fromhex("DAA320A7"), "the slave's log should start with a record"
        with open(slave_log, "r+b") as fh:
            fh.seek(200)
            b = fh.read(1)
            fh.seek(200)
            fh.write(bytes([b[0] ^ 0xFF]))
        answer = ask(auditor, f"{run_dir}\t{tmp_path / 'r2'}\n")
        assert answer.get("failed") is True, answer
        auditor.stdin.close()
        assert auditor.wait(timeout=60) == 0, (tmp_path / "auditor.log").read_text()[-3000:]
    finally:
        if auditor.poll() is None:
            auditor.kill()
            auditor.wait()
        log.close()
    # ... and it names it: the slave's node and the offset of the record that holds byte 200
    from rmqha.broker.store import record

    pos = 0
    while pos + record.message_size(data[pos : pos + 8]) <= 200:
        assert record.message_size(data[pos : pos + 8]) > 0, "byte 200 should be inside a record"
        pos += record.message_size(data[pos : pos + 8])
    damaged, node = int(slave_log.name) + pos, slave_log.parents[2].name
    fails = [line for line in answer["verdicts"] if line.startswith("FAIL ")]
    assert any(node in line and str(damaged) in line for line in fails), answer["verdicts"]


def ask(auditor, line: str, timeout: float = 300) -> dict:
    """One line to `pipeline --serve`, its one `audited {json}` answer back (other output is skipped); a
    reader thread keeps the deadline even when the child prints nothing."""
    import json
    import queue
    import threading

    auditor.stdin.write(line)
    auditor.stdin.flush()
    answers: queue.Queue = queue.Queue()

    def read():
        for out in auditor.stdout:
            if out.startswith("audited "):
                answers.put(json.loads(out[len("audited ") :]))
                return
        answers.put(None)

    threading.Thread(target=read, daemon=True).start()
    try:
        answer = answers.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError(f"pipeline --serve gave no answer to {line.strip()!r} in {timeout:.0f} s") from None
    assert answer is not None, f"pipeline --serve ended without answering {line.strip()!r}"
    return answer


def _acked_and_missing(stdout: str) -> tuple[int, list[str]]:
    counts = next(line.split() for line in stdout.splitlines() if line.startswith("acknowledged"))
    missing = next(line.split()[1:] for line in stdout.splitlines() if line.startswith("missing"))
    return int(counts[1]), missing


def _sends_of(run_dir, send_ids: list[str]) -> str:
    """The producer history's lines for these sends: where each was stored, for a failure's message."""
    wanted = set(send_ids)
    lines = (run_dir / "history" / "producer.jsonl").read_text().splitlines()
    return "\n".join(line for line in lines if any(f'"send_id":"{s}"' in line for s in wanted))
