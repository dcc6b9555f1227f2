"""rmqha/broker/namesrv/guard.py: a cluster-secret signature a peer wrote in any text is checked, never raised on."""

import pytest

from rmqha.broker.acl.rules import SIGNATURE
from rmqha.broker.namesrv import guard
from rmqha.broker.remoting.codes import VERSION_V4_9_8, RequestCode

SECRET = "cluster-secret-cluster-secret"


@pytest.mark.parametrize("bad", ["签名", "é", "\udc80"])
@pytest.mark.parametrize("timed", [False, True])
def test_a_signature_that_is_not_ascii_does_not_verify(bad, timed):
    fields = {"brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911"}
    if timed:
        signed = guard.sign_cluster_timed(fields, b"{}", SECRET, 1000, code=RequestCode.REGISTER_BROKER, audience="ns1")
    else:
        signed = guard.sign_cluster(fields, b"{}", SECRET)
    assert guard.is_signed(RequestCode.REGISTER_BROKER, VERSION_V4_9_8, signed, b"{}", SECRET)
    signed[SIGNATURE] = bad
    assert not guard.is_signed(RequestCode.REGISTER_BROKER, VERSION_V4_9_8, signed, b"{}", SECRET)


def test_a_lone_surrogate_in_a_signed_field_does_not_raise():
    fields = {"brokerName": "broker-\ud800"}
    signed = guard.sign_cluster_timed(fields, b"{}", SECRET, 1000, code=RequestCode.REGISTER_BROKER, audience="ns1")
    assert guard.is_signed(RequestCode.REGISTER_BROKER, VERSION_V4_9_8, signed, b"{}", SECRET)
