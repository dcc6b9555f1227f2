"""rmqha/pipeline/trace.py: RocketMQ's trace records, parsed and matched to stored messages."""

from rmqha.pipeline import trace

C, F = "\x01", "\x02"


def pub(ts, msg_id, ok="true"):
    return (
        C.join(
            [
                "Pub",
                str(ts),
                "DefaultRegion",
                "PG",
                "TopicA",
                msg_id,
                "tagA",
                "k1",
                "127.0.0.1:10911",
                "12",
                "3",
                "0",
                "0A00000100002A9F0000000000000000",
                ok,
            ]
        )
        + F
    )


def test_a_body_of_several_records_is_parsed():
    body = (
        pub(1000, "U1")
        + pub(1005, "U2", "false")
        + C.join(["SubBefore", "2000", "DefaultRegion", "CG", "req-1", "U1", "0", "k1"])
        + F
        + C.join(["SubAfter", "req-1", "U1", "7", "true", "k1", "0"])
        + F
    ).encode()
    rs = trace.parse(body)
    assert [r.kind for r in rs] == ["Pub", "Pub", "SubBefore", "SubAfter"]
    assert (rs[0].timestamp_ms, rs[0].topic, rs[0].msg_id, rs[0].store_host, rs[0].cost_ms, rs[0].success) == (
        1000,
        "TopicA",
        "U1",
        "127.0.0.1:10911",
        3,
        True,
    )
    assert rs[1].success is False and rs[2].group == "CG" and rs[3].cost_ms == 7
    s = trace.summary(rs, {"U1": 1004, "U2": 1020})
    assert (s["pub"], s["sub"], s["matched"], s["consumed"], s["failedSends"]) == (2, 2, 2, 1, 1)
    assert s["produceToStoreMs"] == {"p50": 15, "p99": 15, "max": 15}
    assert s["storeToConsumeMs"] == {"p50": 996, "p99": 996, "max": 996}  # U1: stored 1004, consumed 2000
    rows = {r["msgId"]: r for r in trace.per_message(rs, {"U1": 1004})}
    assert rows["U1"] == {
        "msgId": "U1",
        "topic": "TopicA",
        "group": "PG",
        "success": True,
        "producedMs": 1000,
        "storedMs": 1004,
        "consumedMs": 2000,
    }
    assert rows["U2"]["storedMs"] is None and rows["U2"]["consumedMs"] is None


def test_garbage_is_skipped_not_fatal():
    assert trace.parse(b"\x02\x02junk\x01\x02") == [trace.TraceRecord("junk")]
    assert trace.summary([], {})["matched"] == 0
