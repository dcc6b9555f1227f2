"""The name server's expiry scan is a supervised periodic service: a failing scan is logged and retried."""

import logging

from test_namesrv_processors import Conn, make_ns, register


def test_a_failing_scan_is_logged_once_and_scanning_goes_on(caplog):
    ns, clock = make_ns()
    ns.factory.idle_timeout = 0  # the idle reaper would close the silent broker too: test the scan alone
    broker = Conn(ns, 1)
    register(broker)
    real, raised = ns.processors.scan_not_active_brokers, []

    def flaky():
        if len(raised) < 3:
            raised.append(clock.seconds())
            raise KeyError("route table bug")
        return real()

    ns.processors.scan_not_active_brokers = flaky
    for _ in range(8):
        clock.advance(10)
    start = clock.seconds() - 80
    assert [t - start for t in raised] == [10, 20, 40]  # retried after 10, then 20 s (back-off)
    for _ in range(6):
        clock.advance(10)
    assert broker.transport.disconnecting  # scanning works again and the silent broker expires
    tracebacks = [r for r in caplog.records if r.levelno >= logging.ERROR and "Traceback" in r.getMessage()]
    assert len(tracebacks) == 1 and "namesrv_broker_scan" in tracebacks[0].getMessage()
    health = ns._scan.health()
    assert health["failures"] == 3 and health["consecutiveFailures"] == 0 and health["running"]
    ns.stop()
