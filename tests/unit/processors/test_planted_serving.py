"""The planted bugs of the serving path (rmqha/broker/planted.py: reorder-pull, duplicate-pull, phantom-pull,
offset-regression) do what they say in PULL_MESSAGE answers and the offset table, store nothing wrong, and
do nothing without plantBug. tests/integration/test_planted_delivery.py shows the audit catches each."""
from __future__ import annotations

import pytest

from rmqha.broker import planted
from rmqha.broker.remoting.codes import RequestCode, ResponseCode
from rmqha.broker.remoting.command import RemotingCommand

from .harness import TOPIC, Broker, decode_records, props, pull, send_v1


def send(b, n, start=0, queue_id=0):
    for i in range(start, start + n):
        r = b.call(send_v1(queue_id=queue_id, body=f"m{i}".encode(),
                           properties=props(KEYS=f"k{i}", UNIQ_KEY=f"U{i:04d}")))
        assert r.code == ResponseCode.SUCCESS
    b.clock.advance(0)


def served(b, offset, max_msgs=32):
    """(queue offset, body) of each message a pull at `offset` returns, and nextBeginOffset."""
    resp = b.call(pull(offset=offset, max_msgs=max_msgs, sys_flag=0x4))
    if not isinstance(resp, RemotingCommand) or resp.code != ResponseCode.SUCCESS:
        return [], resp
    return ([(m.queue_offset, m.body.decode()) for m in decode_records(resp.body)],
            int(resp.ext_fields["nextBeginOffset"]))


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
    assert order == [*range(9), 10, 9, *range(11, 19), 20, 19, *range(21, 25)][:len(order)]
    assert [o for o, _ in got] == list(range(len(got))) and nxt == len(got)
    # the store is untouched
    assert [m.body for m in decode_records(b"".join(b.store.get_messages(TOPIC, 0, 0, 32).records))] == \
        [f"m{i}".encode() for i in range(25)]


def test_reorder_holds_a_fresh_n_back_until_n_plus_1_is_stored(make):
    b = make("reorder-pull")
    send(b, 10)                         # offsets 0..9; 9 has no 10 yet
    got, nxt = served(b, 0)
    assert [o for o, _ in got] == list(range(9)) and nxt == 9
    resp = b.call(pull(offset=9, sys_flag=0x2 | 0x4))   # suspend: held until offset 10 is stored
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


def test_duplicate_serves_two_earlier_messages_again_every_10th_pull(make):
    b = make("duplicate-pull")
    send(b, 20)
    seen = []
    for off in range(planted.DUPLICATE_EVERY):
        got, nxt = served(b, off, max_msgs=1)
        seen.extend(o for o, _ in got)
    assert seen == [*range(9), 7, 8, 9]


def test_phantom_replaces_the_last_message_of_every_10th_answer_and_serves_it_next(make):
    b = make("phantom-pull")
    send(b, 30)
    bodies, keys = [], []
    off = 0
    for _ in range(planted.PHANTOM_EVERY + 1):
        resp = b.call(pull(offset=off, max_msgs=1, sys_flag=0x4))
        m = decode_records(resp.body)[0]
        bodies.append((m.queue_offset, m.body[:9]))
        keys.append(m.keys)
        off = int(resp.ext_fields["nextBeginOffset"])
    n = planted.PHANTOM_EVERY - 1
    assert bodies[n - 1:] == [(n - 1, f"m{n - 1}".encode()), (n, b"planted-p"), (n, f"m{n}".encode())]
    assert keys[n] == "planted-phantom-broker-a-0-1"
    assert keys[n] not in {m.keys for m in decode_records(b"".join(b.store.get_messages(TOPIC, 0, 0, 32).records))}


def update_offset(b, offset, queue_id=0, group="CG"):
    return b.call(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
        "consumerGroup": group, "topic": TOPIC, "queueId": queue_id, "commitOffset": offset}))


def test_offset_regression_moves_a_committed_offset_back_once_and_holds_it(make):
    b = make("offset-regression")
    off = b.server.offsets
    update_offset(b, 30)
    update_offset(b, 45)
    assert off.query("CG", TOPIC, 0) == 45          # not past 40 before this commit: stored as is
    update_offset(b, 50)
    assert off.query("CG", TOPIC, 0) == 45 - planted.REGRESS_BY
    update_offset(b, 55)
    assert off.query("CG", TOPIC, 0) == 45 - planted.REGRESS_BY   # commits ignored while held
    b.clock.advance(planted.REGRESS_HOLD_S + 0.1)
    update_offset(b, 60)
    update_offset(b, 61)
    assert off.query("CG", TOPIC, 0) == 61           # once per queue
    update_offset(b, 50, group="%RETRY%CG")          # never a system topic's
