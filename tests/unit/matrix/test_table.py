"""rmqha/matrix/table.py and figures.py: a fault's figures are slices of the audit's per-send and per-try
tables; the group each send and try belongs to is the audit's (its rule is tested on histories in
tests/unit/pipeline/test_delivery_groups.py)."""

from rmqha.matrix import figures, table

from .fabricate import TOPIC, audited_summary, cell_samples_by_id, fabricate, fault


def test_a_send_belongs_to_the_group_the_audit_says_acknowledged_it(tmp_path):
    """review-1 M2: the first try timed out on broker-a, which stored it anyway; the retry was acknowledged
    by broker-b. The audit places the send on broker-b: its availability and its fault are broker-b's."""
    ok = [("SEND_OK", 500, 510)]
    sends = [
        ("a0", "broker-a", ok),
        (
            "x1",
            None,
            [("ERROR", 10100, 10200, {"group": "broker-a"}), ("SEND_OK", 10300, 10310, {"group": "broker-b"})],
        ),
    ]
    fabricate(tmp_path, sends, receives=[("a0", None, 3000), ("x1", None, 13000)])
    got = table.run_table(tmp_path)
    assert got.audited and got.stores and got.sends["x1"]["group"] == "broker-b"
    f = [fault(1, "kill-master", start=10000, end=11000)]
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 0}, 2))[1]
    assert got["acked_recounted"] == 0 and got["excluded"] == {}
    assert got["group_availability"]["broker-b"]["accepted"] == 1
    # the audit's summary and its table disagree: named
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 1}, 2))[1]
    assert got["excluded"] == {"acknowledged the audit counted 1, its per-send table 0": 1}
    # the same histories, the audit's table placing x1 and its answer on broker-a (as it does when the answer
    # names broker-a's copy): the matrix follows the table, not the copies
    fabricate(tmp_path, sends, receives=[("a0", None, 3000), ("x1", None, 13000)], table={"x1": {"group": "broker-a"}})
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 1}, 2))[1]
    assert got["acked_recounted"] == 1 and got["delivered"] == 1 and got["excluded"] == {}


def test_an_acknowledged_send_the_audit_places_in_no_group_is_named(tmp_path):
    """The client's internal retry left one UNIQ_KEY in both groups and the answer names neither copy: the
    audit gives it no group (ambiguous); no group's fault counts it, and each cell of its time names it."""
    fabricate(
        tmp_path,
        [("x1", "broker-b", [("SEND_OK", 10300, 10310, {"uniq": "U-x1"})])],
        receives=[("x1", None, 13000)],
        extra_copies=[("broker-a", "x1", "U-x1", TOPIC)],
        table={"x1": {"group": None, "ambiguous": ["broker-a", "broker-b"]}},
    )
    f = [fault(1, "kill-master", start=10000, end=11000)]
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 0}, 1))[1]
    assert got["acked_recounted"] == 0
    assert got["excluded"] == {"acknowledged, stored in two groups, the answer names neither (broker-a, broker-b)": 1}


def test_tries_count_on_the_group_the_audit_gave_them(tmp_path):
    """Availability counts each try on the audit's group for it; a try it gives none is "?"."""
    t = table.RunTable()
    t.tries = [(1000, 1010, "SEND_OK", "broker-b"), (1100, 1110, "FLUSH_SLAVE_TIMEOUT", "broker-a")]
    t.tries += [(1200, 1300, "ERROR", None), (1400, 1410, "SEND_OK", None)]
    ga = figures.group_availability(t, 0, 2000)
    assert (ga["broker-a"]["accepted"], ga["broker-a"]["not_accepted"]) == (0, {"FLUSH_SLAVE_TIMEOUT": 1})
    assert ga["broker-b"]["share"] == 1.0 and ga["?"] == {"errors": 1, "unknown": 1}


def test_a_run_audited_without_the_tables_is_not_audited(tmp_path):
    """An audit older than the tables: the cell says to audit the run again, never counts from elsewhere."""
    fabricate(tmp_path, [("a1", "broker-a", [("SEND_OK", 1500, 1510)])], [("a1", None, 3000)])
    (tmp_path / "report" / "sends.jsonl").unlink()
    f = [fault(1, "kill-master", start=1000, end=2000)]
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 1}, 1))[1]
    assert got["delivered"] is None and "audit the run again" in got["not_audited"]


def test_a_send_the_audit_did_not_read_fails_every_cell(tmp_path):
    """A producer's file one folder down that the audit's tables do not hold (the audit read history/*.jsonl
    only until runfolder.history_files read sub-folders; or the tables are older than the file). Its
    acknowledged send, never received, is in no table and no summary count: without a cross-check the cell
    passes with a loss nobody counted."""
    import json

    fabricate(tmp_path, [("a1", "broker-a", [("SEND_OK", 1500, 1510)])], [("a1", None, 3000)])
    sub = tmp_path / "history" / "p2"
    sub.mkdir()
    line = {"client": "p2", "seq": 0, "topic": TOPIC, "send_id": "z9", "start_ms": 1600, "end_ms": 1610}
    sub.joinpath("producer-2.jsonl").write_text(
        json.dumps(line | {"op": "invoke"}) + "\n" + json.dumps(line | {"op": "send", "status": "SEND_OK"}) + "\n"
    )
    f = [fault(1, "kill-master", start=1000, end=2000)]
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 1}, 1))[1]
    assert len(got["excluded"]) == 2 and got["excluded_where"], got["excluded"]
    assert any("does not hold" in k for k in got["excluded"]) and any(
        "hold 2 send answers" in k for k in got["excluded"]
    )
    assert not got["explained"]


def test_a_table_of_another_run_fails_every_cell(tmp_path):
    """A sends.jsonl left by another audit (a send the histories do not hold, an answer more than they do)
    is named, never sliced as if it were this run's."""
    import json

    fabricate(tmp_path, [("a1", "broker-a", [("SEND_OK", 1500, 1510)])], [("a1", None, 3000)])
    with open(tmp_path / "report" / "sends.jsonl", "a") as fh:
        fh.write(
            json.dumps({"send_id": "old", "topic": TOPIC, "state": "indeterminate", "first_ms": 1} | _EMPTY) + "\n"
        )
    f = [fault(1, "kill-master", start=1000, end=2000)]
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 1}, 1))[1]
    assert list(got["excluded"]) == [
        "a send in the audit's report/sends.jsonl no history holds (a table of another run or audit?)"
    ]
    with open(tmp_path / "report" / "tries.jsonl", "a") as fh:
        fh.write(json.dumps({"send_id": "a1", "start_ms": 1, "end_ms": 2, "status": "SEND_OK", "group": None}) + "\n")
    got = cell_samples_by_id(tmp_path, audited_summary(f, {"#1 kill-master broker-a": 1}, 1))[1]
    assert (
        "the histories hold 1 send answers, the audit's report/tries.jsonl 2 (a table of another run or audit?)"
        in (got["excluded"])
    )


_EMPTY = {"acked_ms": None, "group": None, "ambiguous": None, "stored": False, "parked": False}
_EMPTY |= {"owed": [], "received": [], "duplicates": 0}
