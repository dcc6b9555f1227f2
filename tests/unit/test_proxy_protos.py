"""rmqha/proxy/third_party/rocketmq_apis/v2: the committed generated modules match the .proto files
(make protos), and the messages are the ones rocketmq-apis v2.1.2 defines (a few wire facts checked by
number)."""

import filecmp

import pytest

from rmqha.proxy.third_party.rocketmq_apis.v2 import definition_pb2 as d
from rmqha.proxy.third_party.rocketmq_apis.v2 import service_pb2 as s


def test_generated_modules_are_up_to_date(tmp_path):
    pytest.importorskip("grpc_tools")
    from rmqha.proxy import protos

    protos.generate(tmp_path)
    here = protos.ROOT / protos.APIS
    for name in ("definition_pb2.py", "service_pb2.py", "service_pb2_grpc.py"):
        assert filecmp.cmp(tmp_path / protos.APIS / name, here / name, shallow=False), f"run make protos: {name}"


def test_wire_facts_of_v2_1_2():
    assert d.DESCRIPTOR.package == "apache.rocketmq.v2"
    assert s.DESCRIPTOR.services_by_name["MessagingService"].full_name == "apache.rocketmq.v2.MessagingService"
    sp = d.SystemProperties.DESCRIPTOR.fields_by_name
    assert (sp["receipt_handle"].number, sp["delivery_attempt"].number, sp["priority"].number) == (12, 16, 22)
    assert d.SLAVE_PERSISTENCE_TIMEOUT == 50402 and d.HA_NOT_AVAILABLE == 50002 and d.MESSAGE_NOT_FOUND == 40401
    # v2.1.2's last change: ChangeInvisibleDurationRequest.suspend (7); v2.2's Settings.client_properties absent
    assert s.ChangeInvisibleDurationRequest.DESCRIPTOR.fields_by_name["suspend"].number == 7
    assert "client_properties" not in d.Settings.DESCRIPTOR.fields_by_name
    methods = {
        m.name: (m.client_streaming, m.server_streaming)
        for m in s.DESCRIPTOR.services_by_name["MessagingService"].methods
    }
    assert methods["Telemetry"] == (True, True) and methods["ReceiveMessage"] == (False, True)
    assert len(methods) == 17
