"""The broker's served-pull log (rmqha/broker/observability/served.py), its HTTP view and the sampler's reader."""

import json

import pytest
from twisted.web.test.requesthelper import DummyRequest

from rmqha.broker.observability.metrics import Registry, metrics_site
from rmqha.broker.observability.served import ServedLog
from rmqha.cluster import sample


def test_entries_are_numbered_and_read_from_where_the_reader_left_off():
    log = ServedLog(incarnation_ms=7, capacity=4)
    assert log.since(0) == {"incarnation": 7, "last": 0, "dropped": 0, "ranges": []}
    for i in range(3):
        log.record(100 + i, "G", "T", i, 10 * i, 10 * i + 5, 5)
    got = log.since(0)
    assert [r[0] for r in got["ranges"]] == [1, 2, 3] and got["dropped"] == 0
    assert got["ranges"][1] == [2, 101, "G", "T", 1, 10, 15, 5]
    assert [r[0] for r in log.since(2)["ranges"]] == [3]
    assert log.since(3)["ranges"] == [] and log.since(99)["ranges"] == []
    assert [r[0] for r in log.since(0, limit=2)["ranges"]] == [1, 2]


def test_a_reader_that_fell_behind_the_ring_is_told_how_many_it_missed():
    log = ServedLog(incarnation_ms=1, capacity=4)
    for i in range(10):
        log.record(i, "G", "T", 0, i, i + 1, 1)
    got = log.since(2)
    assert got["dropped"] == 4 and [r[0] for r in got["ranges"]] == [7, 8, 9, 10]
    assert log.since(8)["dropped"] == 0
    with pytest.raises(ValueError):
        ServedLog(1, capacity=0)


def _get(site, path, args):
    req = DummyRequest([path.encode()])
    req.args = {k.encode(): [v.encode()] for k, v in args.items()}
    res = site.resource.getChildWithDefault(path.encode(), req)
    return req, res.render_GET(req)


def test_the_http_view_returns_json_and_refuses_bad_numbers():
    log = ServedLog(incarnation_ms=5)
    log.record(1, "G", "T", 0, 0, 3, 3)
    site = metrics_site(Registry(), lambda: {}, served=log)
    _req, body = _get(site, "served", {"after": "0"})
    assert json.loads(body)["ranges"] == [[1, 1, "G", "T", 0, 0, 3, 3]]
    req, body = _get(site, "served", {"after": "x"})
    assert req.responseCode == 400 and b"integers" in body


def test_the_sampler_reads_each_entry_once_and_starts_again_after_a_restart(monkeypatch):
    logs = {"n1": ServedLog(incarnation_ms=1)}

    def fake_fetch(url, timeout):
        after = int(url.rsplit("after=", 1)[1])
        return logs["n1"].since(after, limit=2), None  # pages of 2: the reader asks again

    monkeypatch.setattr(sample, "fetch_status", fake_fetch)
    reader = sample.ServedReader(
        {"nodes": [{"name": "n1", "brokerName": "b", "brokerId": 0, "statusUrl": "http://h:1/status"}]}
    )
    for i in range(5):
        logs["n1"].record(i, "G", "T", 0, i, i + 1, 1)
    rows = reader.rows()
    assert [r["seq"] for r in rows] == [1, 2, 3, 4, 5] and rows[0]["node"] == "n1" and rows[0]["incarnation"] == 1
    assert reader.rows() == []
    logs["n1"] = ServedLog(incarnation_ms=2)  # the node restarted: a new log numbered from 1
    logs["n1"].record(9, "G", "T", 1, 0, 2, 2)
    rows = reader.rows()
    assert [(r["seq"], r["incarnation"], r["from"]) for r in rows] == [(1, 2, 0)]
    assert sample.served_url("http://10.0.0.1:8080/status", 4) == "http://10.0.0.1:8080/served?after=4"
