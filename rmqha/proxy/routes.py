"""Topic routes from the name server as 5.x's proxy hands them to gRPC clients (tests:
tests/unit/test_proxy_convert.py).

In cluster mode every queue's broker endpoint is the proxy itself (the address the client dialled), so
clients only ever talk to the proxy; the broker name says which broker group the proxy forwards to.
Queues are laid out as RouteActivity.genMessageQueueFromQueueData does: read-only, write-only, then
read-write ids. Topics here carry no message-type attribute (4.x topic configs), so every queue accepts
all four classic types (5.x's MIXED); see README.md.
"""

from __future__ import annotations

from rmqha.broker.remoting import json_body
from rmqha.broker.remoting.codes import MASTER_ID, PERM_READ, PERM_WRITE
from rmqha.proxy.third_party.rocketmq_apis.v2 import definition_pb2 as d

MIXED = (d.NORMAL, d.FIFO, d.DELAY, d.TRANSACTION)


def parse(body: bytes) -> dict:
    """TopicRouteData's JSON (numeric brokerAddrs keys fixed as the broker's codec does)."""
    return json_body.loads(body)


def master_address(route: dict, broker_name: str) -> str | None:
    for bd in route.get("brokerDatas") or []:
        if bd.get("brokerName") == broker_name:
            addrs = bd.get("brokerAddrs") or {}
            return addrs.get(str(MASTER_ID)) or addrs.get(MASTER_ID)
    return None


def any_address(route: dict, broker_name: str) -> str | None:
    """The master, else the slave with the lowest id (for reads that a slave can serve)."""
    for bd in route.get("brokerDatas") or []:
        if bd.get("brokerName") == broker_name:
            addrs = {int(k): v for k, v in (bd.get("brokerAddrs") or {}).items()}
            return addrs[min(addrs)] if addrs else None
    return None


def _broker(name: str, endpoints: d.Endpoints) -> d.Broker:
    return d.Broker(name=name, id=MASTER_ID, endpoints=endpoints)


def _live_queue_datas(route: dict):
    masters = {bd.get("brokerName") for bd in route.get("brokerDatas") or [] if master_address(route, bd["brokerName"])}
    return [q for q in route.get("queueDatas") or [] if q.get("brokerName") in masters]


def message_queues(route: dict, topic: d.Resource, endpoints: d.Endpoints) -> list[d.MessageQueue]:
    out = []
    for q in sorted(_live_queue_datas(route), key=lambda q: q["brokerName"]):
        perm, r_n, w_n = int(q.get("perm", 6)), int(q.get("readQueueNums", 0)), int(q.get("writeQueueNums", 0))
        readable, writable = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
        r = w = rw = n = 0
        if readable and writable:
            rw = min(r_n, w_n)
            r, w = r_n - rw, w_n - rw
        elif writable:
            w = w_n
        elif readable:
            r = r_n
        else:
            n = max(1, r_n, w_n)
        broker = _broker(q["brokerName"], endpoints)
        kinds = [(d.READ, r), (d.WRITE, w), (d.READ_WRITE, rw), (d.NONE, n)]
        qid = 0
        for permission, count in kinds:
            for _ in range(count):
                out.append(
                    d.MessageQueue(
                        topic=topic, id=qid, permission=permission, broker=broker, accept_message_types=MIXED
                    )
                )
                qid += 1
    return out


def write_queues(route: dict) -> list[tuple[str, int]]:
    """(broker name, queue id) of every writable queue, brokers in name order: what a send picks from."""
    out = []
    for q in sorted(_live_queue_datas(route), key=lambda q: q["brokerName"]):
        if int(q.get("perm", 6)) & PERM_WRITE:
            out += [(q["brokerName"], i) for i in range(int(q.get("writeQueueNums", 0)))]
    return out


def assignments(route: dict, topic: d.Resource, endpoints: d.Endpoints, fifo: bool) -> list[d.Assignment]:
    """RouteActivity.queryAssignment: one queue id -1 per readable broker (POP picks the queue), or
    every read queue for a FIFO group."""
    out = []
    for q in sorted(_live_queue_datas(route), key=lambda q: q["brokerName"]):
        perm, r_n = int(q.get("perm", 6)), int(q.get("readQueueNums", 0))
        if not (perm & PERM_READ and r_n > 0):
            continue
        permission = {6: d.READ_WRITE, 4: d.READ, 2: d.WRITE}.get(perm & 6, d.NONE)
        broker = _broker(q["brokerName"], endpoints)
        ids = range(r_n) if fifo else [-1]
        out += [
            d.Assignment(message_queue=d.MessageQueue(topic=topic, id=i, permission=permission, broker=broker))
            for i in ids
        ]
    return out
