"""rmqha/cluster/repair.py and repair_plan.py: every stranded record is put back the way 4.9 would serve it
(delayed to its real topic with its level, retry to its retry topic, an unresolved half as a half), or
the cut is refused; every re-sent message, UNIQ_KEY or not, is on the master before the cut."""

import dataclasses
import shutil

import pytest

from rmqha.broker.store import record
from rmqha.broker.store.delay import SCHEDULE_TOPIC
from rmqha.broker.store.message_store import MessageStore
from rmqha.broker.transaction import messages as tx
from rmqha.cluster import ClusterError
from rmqha.cluster import repair as repair_mod
from rmqha.cluster.repair import find_fork, records, repair_slave
from rmqha.cluster.repair_plan import REPAIR_PROPERTY, missing, plan

LEVELS = (1000, 5000, 10000)


def msg(topic="T", body=b"b", qid=1, **props):
    return record.Message(topic=topic, body=body, queue_id=qid, properties=dict(props))


def parked(m, level=2):
    m = dataclasses.replace(m, properties=dict(m.properties) | {"DELAY": str(level)})
    from rmqha.broker.store.delay import to_schedule_topic

    to_schedule_topic(m, LEVELS)
    return m


def stored(m):
    """What the master's store makes of a message the repair sends (the send path's half, the delay)."""
    if tx.is_half(m.properties):
        return tx.to_half(m)
    return parked(m, int(m.properties["DELAY"])) if "DELAY" in m.properties else m


def test_a_parked_delayed_message_goes_back_to_its_real_topic_with_its_level_and_is_verified():
    slave = [(100, parked(msg("Orders", b"later", 3, UNIQ_KEY="D1", KEYS="k")))]
    assert slave[0][1].topic == SCHEDULE_TOPIC
    p = plan(slave, [], "s")
    assert not p.blocked and [r.kind for r in p.resend] == ["delayed"]
    m = p.resend[0].message
    assert (m.topic, m.queue_id, m.properties["DELAY"]) == ("Orders", 3, "2")
    assert "REAL_TOPIC" not in m.properties and m.properties[REPAIR_PROPERTY] == "s@100"
    assert missing(p.resend, []) == p.resend  # not on the master yet: no cut
    on_master = [stored(m)]  # parked again on the master
    assert on_master[0].topic == SCHEDULE_TOPIC and missing(p.resend, on_master) == []
    # ... or already delivered there by its schedule (time_up keeps the properties)
    from rmqha.broker.store.delay import time_up

    assert missing(p.resend, [time_up(on_master[0])]) == []
    again = plan(slave, on_master, "s")
    assert again.resend == [] and again.already_on_master == 1


def test_a_parked_message_whose_delivered_copy_is_stranded_too_is_sent_once():
    from rmqha.broker.store.delay import time_up

    d = parked(msg("Orders", b"x", UNIQ_KEY="D2"))
    p = plan([(100, d), (300, time_up(d))], [], "s")
    assert [(r.kind, r.offset, r.message.topic) for r in p.resend] == [("message", 300, "Orders")]
    assert sum(p.skipped.values()) == 1


def test_a_message_without_uniq_key_is_resent_once_and_verified_by_tag_body_keys_and_topic():
    m = msg("T", b"no-uniq", KEYS="order-7")
    twin = msg("T", b"no-uniq", KEYS="order-7")  # an equal send of its own on the master: not proof
    p = plan([(200, m)], [twin], "s")
    assert [r.offset for r in p.resend] == [200] and p.already_on_master == 0
    r = p.resend[0]
    assert missing([r], [twin]) == [r]
    assert missing([r], [dataclasses.replace(r.message, body=b"other")]) == [r]
    assert missing([r], [dataclasses.replace(r.message, topic="U")]) == [r]
    assert missing([r], [dataclasses.replace(r.message, properties=r.message.properties | {"KEYS": "x"})]) == [r]
    assert missing([r], [r.message]) == []
    again = plan([(200, m)], [r.message], "s")  # a second run: the tag is there, nothing re-sent
    assert again.resend == [] and again.already_on_master == 1


def test_a_retry_message_goes_to_its_retry_topic_and_may_land_in_the_dlq():
    m = record.Message(topic="%RETRY%G", body=b"r", reconsume_times=16, properties={"UNIQ_KEY": "R1"})
    p = plan([(10, m)], [], "s")
    r = p.resend[0]
    assert (r.kind, r.message.topic, r.message.reconsume_times) == ("retry", "%RETRY%G", 16)
    assert missing([r], [dataclasses.replace(r.message, topic="%DLQ%G")]) == []
    # the original message (same UNIQ_KEY, reconsumed 0 times) on the master is not the retry
    assert plan([(10, m)], [msg("T", b"r", UNIQ_KEY="R1")], "s").resend == [r]


def test_transactions_unresolved_half_goes_back_as_a_half_resolved_ones_and_committed_copies_do_not():
    open_half = dataclasses.replace(
        tx.to_half(msg("Pay", b"h1", 2, UNIQ_KEY="H1", PGROUP="PG", TRAN_MSG="true")), queue_offset=5
    )
    done_half = dataclasses.replace(
        tx.to_half(msg("Pay", b"h2", 2, UNIQ_KEY="H2", PGROUP="PG", TRAN_MSG="true")), queue_offset=6
    )
    op = tx.op_message(done_half, 0, ("127.0.0.1", 1))
    copy = tx.committed(done_half)
    assert copy.properties["TRAN_MSG"] == "true"  # 4.9.8 stores it so
    p = plan([(1, open_half), (2, done_half), (3, op), (4, copy)], [], "s")
    assert [(r.offset, r.kind) for r in p.resend] == [(1, "half"), (4, "message")]
    half, plain = p.resend[0], p.resend[1]
    assert (half.message.topic, half.message.queue_id, half.producer_group) == ("Pay", 2, "PG")
    assert half.message.properties["TRAN_MSG"] == "true" and "REAL_TOPIC" not in half.message.properties
    assert half.message.transaction_type == record.TRANSACTION_PREPARED
    assert "TRAN_MSG" not in plain.message.properties  # else the master would store a half
    assert missing(p.resend, [stored(r.message) for r in p.resend]) == []
    assert sum(p.skipped.values()) == 2  # the resolved half and its op record


def test_a_record_no_client_may_send_blocks_the_cut_unless_its_loss_is_accepted():
    m = msg("TRANS_CHECK_MAX_TIME_TOPIC", b"gave-up", UNIQ_KEY="X")
    p = plan([(7, m)], [], "s")
    assert p.resend == [] and len(p.blocked) == 1 and "offset 7" in p.blocked[0]
    p = plan([(7, m)], [], "s", accept_loss=frozenset({"TRANS_CHECK_MAX_TIME_TOPIC"}))
    assert p.blocked == [] and sum(p.skipped.values()) == 1


# -- the whole repair against two real commit logs ------------------------------------------------

FILE = 1 << 20


def store(path):
    s = MessageStore(str(path), commitlog_file_size=FILE, cq_file_size=20 * 1000, preallocate=False)
    s.start()
    return s


class FakeCluster:
    """One group, two stores on disk; the 'send' is the master's store taking the message."""

    def __init__(self, tmp_path):
        self.root = tmp_path
        self.up = {"m": True, "s": False}
        self.credentials = None
        self.caught_up = False

    def masters(self):
        return ["m"]

    def node(self, name):
        return {"brokerName": "g", "commitlogFileSize": FILE}

    def slaves_of(self, master):
        return ["s"]

    def store_path(self, name):
        return self.root / name

    def running(self, name):
        return self.up[name]

    def stop(self, name):
        self.up[name] = False

    def start(self, name):
        self.up[name] = True

    def addr(self, name):
        return "127.0.0.1:1"

    def wait_caught_up(self, timeout, masters):
        self.caught_up = True


def two_logs(tmp_path, stranded):
    master = store(tmp_path / "m")
    for i in range(3):
        master.put_message(msg("T", f"common{i}".encode(), UNIQ_KEY=f"C{i}"))
    master.flush()
    master.shutdown()
    shutil.copytree(tmp_path / "m", tmp_path / "s")
    master, slave = store(tmp_path / "m"), store(tmp_path / "s")
    for m in stranded:
        slave.put_message(m)
    slave.shutdown()
    master.put_message(msg("T", b"the master's own history past the fork, longer than the slave's", UNIQ_KEY="M9"))
    return master


def test_repair_puts_a_parked_and_a_no_uniq_key_message_back_before_it_cuts(tmp_path, monkeypatch):
    master = two_logs(
        tmp_path, [msg("Orders", b"later", 0, UNIQ_KEY="D1", DELAY="2"), msg("T", b"no-uniq", KEYS="order-7")]
    )
    sent = []

    class Sender:
        def __init__(self, *a, **k):
            pass

        def send(self, m, extra_props=None, producer_group=""):
            sent.append(m)
            master.put_message(dataclasses.replace(m, properties=dict(m.properties)))
            return 0

        def close(self):
            pass

    monkeypatch.setattr(repair_mod, "Sender", Sender)
    c = FakeCluster(tmp_path)
    fork, _ = find_fork(tmp_path / "m" / "commitlog", tmp_path / "s" / "commitlog")
    assert [m.topic for _o, m, _r in records(tmp_path / "s" / "commitlog", fork)] == [SCHEDULE_TOPIC, "T"]
    res = repair_slave(c, "g", "m", "s", say=lambda *_: None)
    assert res.resent == res.stranded == 2 and res.resent_by_kind == {"delayed": 1, "message": 1}
    assert [(m.topic, m.properties.get("DELAY")) for m in sent] == [("Orders", "2"), ("T", None)]
    on_master = [m for _o, m, _r in records(tmp_path / "m" / "commitlog", fork)]
    assert {(m.topic, m.properties.get("REAL_TOPIC")) for m in on_master if REPAIR_PROPERTY in m.properties} == {
        (SCHEDULE_TOPIC, "Orders"),
        ("T", None),
    }
    assert res.truncated_bytes > 0 and c.caught_up and c.up["s"]
    assert find_fork(tmp_path / "m" / "commitlog", tmp_path / "s" / "commitlog")[0] is None
    master.shutdown()


def test_repair_does_not_cut_when_a_resent_message_is_not_on_the_master(tmp_path, monkeypatch):
    two_logs(tmp_path, [msg("T", b"no-uniq", KEYS="order-7")]).shutdown()

    class Sender:  # answers SUCCESS and stores nothing
        def __init__(self, *a, **k):
            pass

        def send(self, m, extra_props=None, producer_group=""):
            return 0

        def close(self):
            pass

    monkeypatch.setattr(repair_mod, "Sender", Sender)
    c = FakeCluster(tmp_path)
    before = (tmp_path / "s" / "commitlog").joinpath("00000000000000000000").read_bytes()
    with pytest.raises(ClusterError, match="NOT truncated"):
        repair_slave(c, "g", "m", "s", say=lambda *_: None)
    assert (tmp_path / "s" / "commitlog").joinpath("00000000000000000000").read_bytes() == before


def test_repair_refuses_and_names_a_stranded_record_it_cannot_put_back(tmp_path, monkeypatch):
    two_logs(tmp_path, [msg("TRANS_CHECK_MAX_TIME_TOPIC", b"gave-up", UNIQ_KEY="X")]).shutdown()
    monkeypatch.setattr(repair_mod, "Sender", None)  # nothing may be sent
    c = FakeCluster(tmp_path)
    with pytest.raises(ClusterError, match="TRANS_CHECK_MAX_TIME_TOPIC.*\n.*--accept-loss"):
        repair_slave(c, "g", "m", "s", say=lambda *_: None)
    assert find_fork(tmp_path / "m" / "commitlog", tmp_path / "s" / "commitlog")[0] is not None
