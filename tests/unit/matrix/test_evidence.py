"""rmqha/matrix/evidence.py: a fault must show its effect in the metric samples."""


def test_a_disk_full_fault_must_show_its_effect():
    from rmqha.matrix.evidence import no_effect

    f = {"kind": "disk-full", "role": "master", "target": "broker-a", "start_ms": 1000, "end_ms": 5000}
    assert "no send was refused" in no_effect(f, {}, True, non_ok=0)
    assert no_effect(f, {}, True, non_ok=3) is None
    s = {"kind": "disk-full", "role": "slave", "target": "broker-a-s", "start_ms": 1000, "end_ms": 5000}
    grows = [(t, t * 10, None) for t in range(0, 6000, 500)]
    stuck_slave = [(t, 777, "broker-a") for t in range(0, 6000, 500)]
    growing_slave = [(t, t * 10, "broker-a") for t in range(0, 6000, 500)]
    assert no_effect(s, {}, True, offsets={"broker-a": grows, "broker-a-s": stuck_slave}) is None
    assert "went on storing" in no_effect(s, {}, True, offsets={"broker-a": grows, "broker-a-s": growing_slave})
    assert no_effect(s, {}, False) is None  # no samples: nothing can be said


def test_a_link_fault_must_show_its_effect():
    from rmqha.matrix.evidence import no_effect

    f = {"kind": "cut", "role": "slave", "target": "broker-a-s", "start_ms": 1000, "end_ms": 5000}
    master = [(t, t, None) for t in range(0, 6000, 500)]
    lagging = [(t, min(t, 1000), "broker-a") for t in range(0, 6000, 500)]
    keeping_up = [(t, t, "broker-a") for t in range(0, 6000, 500)]
    assert no_effect(f, {}, True, offsets={"broker-a": master, "broker-a-s": lagging}) is None
    assert "never fell behind" in no_effect(f, {}, True, offsets={"broker-a": master, "broker-a-s": keeping_up})
    assert no_effect(f, {}, True, non_ok=2, offsets={"broker-a": master, "broker-a-s": keeping_up}) is None
    cc = {"kind": "client-cut", "role": "master", "target": "broker-a", "start_ms": 1000, "end_ms": 5000}
    assert "every send succeeded" in no_effect(cc, {}, True) and no_effect(cc, {}, True, non_ok=1) is None
