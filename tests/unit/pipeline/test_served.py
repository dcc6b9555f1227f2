"""Which node served each receive: the served-pull log matched to the histories (rmqha/pipeline/served.py)."""

import json
import os

from rmqha.pipeline import faults, history_check, runfolder, served

T0 = 1_700_000_000_000


def write_served(run_root, rows, name="pulls.jsonl", extra_lines=()):
    d = os.path.join(run_root, "served")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "a") as fh:
        for node, broker, qid, frm, nxt, ts, seq in rows:
            fh.write(
                json.dumps(
                    {
                        "node": node,
                        "brokerName": broker,
                        "brokerId": 0 if node == "broker-a-0" else 1,
                        "incarnation": 1,
                        "seq": seq,
                        "ts_ms": ts,
                        "group": "G",
                        "topic": "T",
                        "queueId": qid,
                        "from": frm,
                        "next": nxt,
                        "messages": nxt - frm,
                    }
                )
                + "\n"
            )
        for line in extra_lines:
            fh.write(line + "\n")


def test_load_skips_rows_read_twice_counts_drops_and_survives_a_cut_line(tmp_path):
    write_served(
        tmp_path,
        [("broker-a-0", "broker-a", 0, 0, 4, T0, 1)],
        extra_lines=[json.dumps({"node": "broker-a-0", "incarnation": 1, "dropped": 3}), '{"node": "bro'],
    )
    write_served(
        tmp_path,
        [("broker-a-0", "broker-a", 0, 0, 4, T0, 1), ("broker-a-1", "broker-a", 1, 0, 2, T0, 1)],
        name="again.jsonl",
    )
    rows, dropped = served.load(str(tmp_path))
    assert dropped == 3
    assert sorted(rows) == [("broker-a-0", "broker-a", "T", 0, 0, 4, T0), ("broker-a-1", "broker-a", "T", 1, 0, 2, T0)]
    assert served.load(str(tmp_path / "nothing")) == ([], 0)


def test_each_receive_goes_to_the_node_whose_pull_covered_it(spark, run_builder):
    rb = run_builder
    rb.master(n=40)  # queues 0-3, offsets 0-9 each
    rb.close()
    rb.slave()
    rb.history()  # receives of all 40, in send order, at T0 + 50 ... T0 + 89
    write_served(
        rb.root,
        [
            ("broker-a-0", "broker-a", 0, 0, 10, T0, 1),  # q0: all from the master
            ("broker-a-0", "broker-a", 1, 0, 5, T0, 2),  # q1: first half from the master ...
            ("broker-a-1", "broker-a", 1, 5, 10, T0 + 1, 1),  # ... second half from the slave
            ("broker-a-1", "broker-a", 2, 0, 10, T0 + 1, 2),  # q2: the slave
            ("broker-a-0", "broker-a", 2, 0, 10, T0 + 60_000, 3),  # a later pull of q2: after every receive
            ("broker-b-1", "broker-b", 3, 0, 10, T0, 1),  # another group's queue 3: not broker-a's
        ],
    )
    nodes = runfolder.load_nodes(rb.root)
    from rmqha.pipeline import decode

    df = decode.decode(spark, nodes).cache()
    hist = history_check.load_histories(spark, runfolder.history_files(rb.root))
    rows, _ = served.load(rb.root)
    f = history_check.gather(spark, df, hist, nodes, rows)
    assert f.served_by == {"broker-a-0": 15, "broker-a-1": 15, served.UNATTRIBUTED: 10}
    assert sum(n for _b, _node, _t, n in f.served_buckets) == 40

    # a kill of the master during the receives of the second half: the buckets say who served then
    kill = faults.FaultInterval(1, "kill-master", "broker-a-0", "broker-a", "master", None, {}, T0 + 70, T0 + 200)
    slave_kill = faults.FaultInterval(2, "kill-master", "broker-a-1", "broker-a", "slave", None, {}, T0, T0 + 200)
    (o,) = served.outages([kill, slave_kill], f.served_buckets)
    assert o.group == "broker-a" and sum(o.by_node.values()) == 40  # one 100 ms bucket holds them all
    text = served.describe({"broker-a-0": 15, "broker-a-1": 15}, 10, 0, True, [o])
    assert "broker-a-0 15, broker-a-1 15" in text and "10 unattributed" in text and "#1 kill-master" in text
    df.unpersist()


def test_without_a_log_the_verdict_says_why():
    assert "no served-pull log" in served.describe({}, 8, 0, False, [])


def test_outages_count_only_master_faults_of_the_group():
    b = [
        ("broker-a", "broker-a-1", 1000, 5),
        ("broker-a", "broker-a-0", 900, 2),
        ("broker-b", "broker-b-0", 1000, 7),
        ("broker-a", "broker-a-1", 5000, 1),
    ]
    f = faults.FaultInterval(3, "power-loss", "broker-a-0", "broker-a", "master", None, {}, 950, 2000)
    never_healed = faults.FaultInterval(4, "pause-master", "broker-a-0", "broker-a", "master", None, {}, 4000, None)
    failed = faults.FaultInterval(
        5, "kill-master", "broker-a-0", "broker-a", "master", None, {}, 0, 9000, inject_error="no such node"
    )
    link = faults.FaultInterval(6, "client-link", "broker-a-0", "broker-a", "master", None, {}, 0, 9000)
    o1, o2 = served.outages([f, never_healed, failed, link], b)
    assert o1.by_node == {"broker-a-1": 5, "broker-a-0": 2}  # the 900 ms bucket reaches into the fault
    assert o2.by_node == {"broker-a-1": 1}


def test_pulls_of_two_nodes_at_the_same_ms_attribute_the_receive_to_neither(spark, run_builder):
    """The latest pulls covering a receive are the master's and the slave's, answered in the same
    millisecond: either may have served it, so it is unattributed, not given to one of them."""
    rb = run_builder
    rb.master(n=8)  # queues 0-3, offsets 0-1 each
    rb.close()
    rb.slave()
    rb.history()
    write_served(
        rb.root,
        [
            ("broker-a-0", "broker-a", 0, 0, 2, T0, 1),  # q0: master and slave at the same ms
            ("broker-a-1", "broker-a", 0, 0, 2, T0, 1),
            ("broker-a-0", "broker-a", 1, 0, 2, T0 - 5, 2),  # q1: the slave's pull is later
            ("broker-a-1", "broker-a", 1, 0, 2, T0, 2),
        ],
    )
    nodes = runfolder.load_nodes(rb.root)
    from rmqha.pipeline import decode

    hist = history_check.load_histories(spark, runfolder.history_files(rb.root))
    rows, _ = served.load(rb.root)
    f = history_check.gather(spark, decode.decode(spark, nodes), hist, nodes, rows)
    assert f.served_by == {"broker-a-1": 2, served.UNATTRIBUTED: 6}


def test_another_brokers_nodes_log_no_served_pulls_so_the_figure_is_unavailable_not_none(tmp_path):
    # Apache's and rocketmq-rust's brokers keep no served-pull log (ours alone does): "no receives" from
    # them would read as a zero
    nodes = [{"name": "broker-a", "implementation": "rust"}, {"name": "broker-a-s", "implementation": "rust"}]
    (tmp_path / "state.json").write_text(json.dumps({"nodes": nodes}))
    unlogged = served.unlogged_nodes(str(tmp_path))
    assert unlogged == {"broker-a": "rust", "broker-a-s": "rust"}
    text = served.describe({}, 85, 0, True, [], unlogged)
    assert (
        text.startswith("unavailable: the brokers of this run (rust: broker-a, broker-a-s)") and "85 receives" in text
    )
    # a mixed group: our node's figure stands, the other's is said to be missing from it
    text = served.describe({"broker-a": 5}, 3, 0, True, [], {"broker-a-s": "apache"})
    assert (
        text
        == "broker-a 5; 3 unattributed; not logged by broker-a-s (apache): what they served is among the unattributed"
    )
    (tmp_path / "state.json").write_text(json.dumps({"nodes": [{"name": "broker-a", "implementation": "ours"}]}))
    assert served.unlogged_nodes(str(tmp_path)) == {} and served.unlogged_nodes(str(tmp_path / "none")) == {}
