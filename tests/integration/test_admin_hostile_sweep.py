"""Every request code, with malformed headers and bodies, to a real broker and name server: each gets an
answer (never silence), and both still serve afterwards. The admin plane added dozens of parsers of
JSON and properties bodies; this sweep is the cheap guard that none of them drops or kills a connection."""

from __future__ import annotations

import random

import pytest

from rmqha.broker.remoting.codes import RequestCode
from rmqha.cluster.standalone import rpc

from .processes import broker_on_namesrv

pytestmark = pytest.mark.integration

BODIES = [b"", b"{", b"\xff" * 64, b'{"groupName":null}', b"a=b\nlistenPort=1", b'{"table":[1,2]}']
FIELDS = [
    {},
    {
        "topic": "",
        "consumerGroup": "%%%",
        "queueId": "-5",
        "timestamp": "x",
        "statsName": "zz",
        "statsKey": "",
        "brokerName": "nope",
        "clientId": "c",
        "msgId": "zz",
        "cluster": "",
        "key": "k",
        "namespace": "n",
        "srcGroup": "a",
        "destGroup": "b",
        "groupName": "TOOLS_CONSUMER",
        "index": "-1",
        "count": "999999999",
    },
]


def test_every_code_with_bad_input_is_answered_and_nothing_falls_over(tmp_path):
    with broker_on_namesrv(tmp_path, "broker-x") as (ns, broker):
        bodies = BODIES + [random.Random(7).randbytes(300)]
        unanswered = []
        for addr, who in ((broker.addr, "broker"), (ns.addr, "namesrv")):
            for code in RequestCode:
                for body in bodies:
                    for fields in FIELDS:
                        try:
                            r = rpc(addr, int(code), fields, body=body, timeout=5)
                        except OSError as e:
                            unanswered.append((who, code.name, repr(e)))
                            continue
                        if r is None:
                            unanswered.append((who, code.name, "no reply"))
        assert unanswered == []
        assert rpc(broker.addr, RequestCode.GET_BROKER_RUNTIME_INFO).code == 0
        assert rpc(ns.addr, RequestCode.GET_BROKER_CLUSTER_INFO).code == 0
