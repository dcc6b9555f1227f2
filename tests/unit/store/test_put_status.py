"""PutStatus: one enum for a send's outcome, with its wire code and "stored" in one table."""

import json

import pytest

from rmqha.broker.remoting.codes import ResponseCode
from rmqha.broker.store.message_store import PutResult, PutStatus

# The reference's mapping (SendMessageProcessor), written out independently of the enum's table.
EXPECTED = {
    "PUT_OK": (ResponseCode.SUCCESS, True),
    "FLUSH_DISK_TIMEOUT": (ResponseCode.FLUSH_DISK_TIMEOUT, True),
    "FLUSH_SLAVE_TIMEOUT": (ResponseCode.FLUSH_SLAVE_TIMEOUT, True),
    "SLAVE_NOT_AVAILABLE": (ResponseCode.SLAVE_NOT_AVAILABLE, True),
    "MESSAGE_ILLEGAL": (ResponseCode.MESSAGE_ILLEGAL, False),
    "PROPERTIES_SIZE_EXCEEDED": (ResponseCode.MESSAGE_ILLEGAL, False),
    "SERVICE_NOT_AVAILABLE": (ResponseCode.SERVICE_NOT_AVAILABLE, False),
    "DISK_FULL": (ResponseCode.SYSTEM_ERROR, False),
    "OS_PAGECACHE_BUSY": (ResponseCode.SYSTEM_ERROR, False),  # SendMessageProcessor.java:512-515 (DLedger)
    "UNKNOWN_ERROR": (ResponseCode.SYSTEM_ERROR, False),  # :520-523
}


def test_every_member_maps_to_exactly_one_response_code_and_stored_flag():
    assert {m.name for m in PutStatus} == set(EXPECTED), "a member without an expected row, or the reverse"
    for member in PutStatus:
        assert isinstance(member.response_code, ResponseCode)
        assert isinstance(member.stored, bool)
        assert (member.response_code, member.stored) == EXPECTED[member.name], member
    # Only PUT_OK is success; every stored outcome is answered with a code the client maps to a SendStatus.
    assert [m for m in PutStatus if m.response_code == ResponseCode.SUCCESS] == [PutStatus.PUT_OK]


def test_reads_as_its_name_in_logs_json_and_comparisons():
    s = PutStatus.FLUSH_SLAVE_TIMEOUT
    assert s == "FLUSH_SLAVE_TIMEOUT" and str(s) == "FLUSH_SLAVE_TIMEOUT" and f"{s}" == "FLUSH_SLAVE_TIMEOUT"
    assert json.dumps({"status": s}) == '{"status": "FLUSH_SLAVE_TIMEOUT"}'
    assert PutStatus("PUT_OK") is PutStatus.PUT_OK


def test_put_result_holds_a_put_status():
    assert PutResult("FLUSH_DISK_TIMEOUT").status is PutStatus.FLUSH_DISK_TIMEOUT
    with pytest.raises(ValueError):
        PutResult("PUT_OKAY")
