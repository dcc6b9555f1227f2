"""The planted bugs of the serving path (rmqha/controls/planted.py: reorder-pull, duplicate-pull, phantom-pull,
offset-regression) do what they say in PULL_MESSAGE answers and the offset table, store nothing wrong, and
do nothing without plantBug. tests/integration/test_planted_delivery.py shows the audit catches each."""

from __future__ import annotations

import pytest

from rmqha.controls import planted
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand

from ..processors.harness import TOPIC, Broker, decode_records, props, pull, send_v1


def send(b, n, start=0, queue_id=0):
    for i in range(start, start + n):
        r = b.call(
            send_v1(queue_id=queue_id, body=f"m{i}".encode(), properties=props(KEYS=f"k{i}", UNIQ_KEY=f"U{i:04d}"))
        )
        assert r.code == ResponseCode.SUCCESS
    b.clock.advance(0)


def served(b, offset, max_msgs=32):
    """(queue offset, body) of each message a pull at `offset` returns, and nextBeginOffset."""
    resp = b.call(pull(offset=offset, max_msgs=max_msgs, sys_flag=0x4))
    if not isinstance(resp, RemotingCommand) or resp.code != ResponseCode.SUCCESS:
        return [], resp
    return (
        [(m.queue_offset, m.body.decode()) for m in decode_records(resp.body)],
        int(resp.ext_fields["nextBeginOffset"]),
    )


@pytest.fixture
def make(tmp_path):
    made = []

    def _make(bugs=None):
        b = Broker(tmp_path / f"b{len(made)}", **({"plantBug": bugs} if bugs else {}))
        made.append(b)
        return b

    yield _make
    for b in made:
        b.stop()


def test_without_the_bugs_pulls_are_exact(make):
    b = make()
    send(b, 30)
    got, nxt = served(b, 0)
    assert got == [(i, f"m{i}") for i in range(30)] and nxt == 30
    assert not isinstance(b.server.pull.store, planted.PlantedServing)
    assert b.server.offsets.commit.__name__ == "commit"


def test_reorder_swaps_n_and_n_plus_1_with_their_offsets(make):
    b = make("reorder-pull")
    send(b, 25)
    got, nxt = served(b, 0)
    # 9 and 19 (n % 10 == 9) swap places with 10 and 20, and take each other's queue offset: a client that
    # sorts by queue offset still hands m10 before m9
    order = [int(body[1:]) for _o, body in got]
    assert order == [*range(9), 10, 9, *range(11, 19), 20, 19, *range(21, 25)][: len(order)]
    assert [o for o, _ in got] == list(range(len(got))) and nxt == len(got)
    # the store is untouched
    assert [m.body for m in decode_records(b"".join(b.store.get_messages(TOPIC, 0, 0, 32).records))] == [
        f"m{i}".encode() for i in range(25)
    ]


def test_reorder_holds_a_fresh_n_back_until_n_plus_1_is_stored(make):
    b = make("reorder-pull")
    send(b, 10)  # offsets 0..9; 9 has no 10 yet
    got, nxt = served(b, 0)
    assert [o for o, _ in got] == list(range(9)) and nxt == 9
    resp = b.call(pull(offset=9, sys_flag=0x2 | 0x4))  # suspend: held until offset 10 is stored
    assert not isinstance(resp, RemotingCommand)
    out = []
    resp.addCallback(out.append)
    send(b, 1, start=10)
    b.clock.advance(0)
    assert [(m.queue_offset, m.body) for m in decode_records(out[0].body)] == [(9, b"m10"), (10, b"m9")]


def test_reorder_serves_a_stale_n_alone(make):
    b = make("reorder-pull")
    send(b, 10)
    b.clock.advance(planted.REORDER_HOLD_MS / 1000 + 1)
    got, nxt = served(b, 9)
    assert got == [(9, "m9")] and nxt == 10


def test_duplicate_serves_every_10th_message_again_with_the_next_answer(make):
    b = make("duplicate-pull")
    send(b, 25)
    got, nxt = served(b, 0, max_msgs=12)
    assert [o for o, _ in got] == list(range(12)) and nxt == 12
    got, nxt = served(b, 12)
    assert [o for o, _ in got] == [0, 10, *range(12, 25)] and nxt == 25
    send(b, 1, start=25)
    got, nxt = served(b, 25)
    assert [o for o, _ in got] == [20, 25]
    got, nxt = served(b, 26)
    assert got == []


def test_phantom_takes_the_place_of_every_10th_message_once_and_the_real_one_follows(make):
    b = make("phantom-pull")
    send(b, 25)
    resp = b.call(pull(offset=0, sys_flag=0x4))
    got = decode_records(resp.body)
    assert [(m.queue_offset, m.body[:1]) for m in got] == [(i, b"m") for i in range(9)] + [(9, b"p")]
    assert got[-1].keys == "planted-phantom-broker-a-0-1" and resp.ext_fields["nextBeginOffset"] == "9"
    # the real message 9: not before PHANTOM_WAIT_MS, then with the next phantom at 19
    assert b.call(pull(offset=9, sys_flag=0x4)).code == ResponseCode.PULL_NOT_FOUND
    b.clock.advance(planted.PHANTOM_WAIT_MS / 1000)
    got, nxt = served(b, 9)
    assert got[0] == (9, "m9") and [o for o, _ in got] == list(range(9, 20)) and nxt == 19
    assert got[-1][1].startswith("planted-phantom-broker-a-0-2")
    # the store is untouched
    assert all(m.keys.startswith("k") for m in decode_records(b"".join(b.store.get_messages(TOPIC, 0, 0, 32).records)))


def test_phantom_only_in_front_of_a_fresh_message(make):
    b = make("phantom-pull")
    send(b, 12)
    b.clock.advance(planted.REORDER_HOLD_MS / 1000 + 1)
    got, nxt = served(b, 0)
    assert got == [(i, f"m{i}") for i in range(12)] and nxt == 12


def update_offset(b, offset, queue_id=0, group="CG"):
    return b.call(
        RemotingCommand.request(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": group, "topic": TOPIC, "queueId": queue_id, "commitOffset": offset},
        )
    )


def test_offset_regression_moves_a_committed_offset_back_once_and_holds_it(make):
    b = make("offset-regression")
    off = b.server.offsets
    update_offset(b, 30)
    update_offset(b, 45)
    assert off.query("CG", TOPIC, 0) == 45  # not past 40 before this commit: stored as is
    update_offset(b, 50)
    assert off.query("CG", TOPIC, 0) == 45 - planted.REGRESS_BY
    update_offset(b, 55)
    assert off.query("CG", TOPIC, 0) == 45 - planted.REGRESS_BY  # commits ignored while held
    b.clock.advance(planted.REGRESS_HOLD_S + 0.1)
    update_offset(b, 60)
    update_offset(b, 61)
    assert off.query("CG", TOPIC, 0) == 61  # once per queue
    update_offset(b, 50, group="%RETRY%CG")  # never a system topic's
