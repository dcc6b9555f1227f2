"""RustClient.admin (tests/integration/rust_client.py) against a stand-in binary: how options become the
CLI's arguments, and how an admin call's one JSON object (or its failure, exit 3) comes back."""

import json
import stat

import pytest

from tests.integration.rust_client import RustClient, RustClientError, queue_key

# prints {"argv": [...]} then whatever FAKE_OUT holds, and exits FAKE_RC
FAKE = """#!/usr/bin/env python3
import json, os, sys
print(json.dumps({"argv": sys.argv[1:]}))
if os.environ.get("FAKE_OUT"):
    print(os.environ["FAKE_OUT"])
sys.exit(int(os.environ.get("FAKE_RC", "0")))
"""


@pytest.fixture
def fake_client(tmp_path):
    # not named `rc`: that name is the real Rust client, and a test asking for it waits for its build
    # (tests/conftest.py)
    binary = tmp_path / "rmq-rust-client"
    binary.write_text(FAKE)
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return RustClient(binary)


def test_options_become_cli_arguments(fake_client, monkeypatch):
    monkeypatch.delenv("FAKE_OUT", raising=False)
    out = fake_client.admin(
        "ns:9876",
        "sub-group",
        "create",
        cluster="C",
        group="G",
        config={"retryMaxTimes": 5},
        remove_offset=True,
        order=False,
        broker_addr=None,
        timeout_ms=3000,
    )
    assert out == {
        "argv": [
            "--namesrv",
            "ns:9876",
            "admin",
            "sub-group",
            "create",
            "--cluster",
            "C",
            "--group",
            "G",
            "--config",
            '{"retryMaxTimes": 5}',
            "--remove-offset",
            "--timeout-ms",
            "3000",
        ]
    }


def test_the_last_object_is_the_result(fake_client, monkeypatch):
    monkeypatch.setenv("FAKE_OUT", json.dumps({"value": "v1"}))
    assert fake_client.admin("ns:1", "kv", "get", namespace="N", key="K") == {"value": "v1"}


def test_a_failed_call_raises_or_comes_back_with_its_error(fake_client, monkeypatch):
    failure = {
        "error": "core.argument.invalid: Argument is invalid",
        "errorCode": 22,
        "errorMessage": "No config item, Namespace: N",
        "causes": [],
    }
    monkeypatch.setenv("FAKE_OUT", json.dumps(failure))
    monkeypatch.setenv("FAKE_RC", "3")
    with pytest.raises(RustClientError, match="No config item, Namespace: N"):
        fake_client.admin("ns:1", "kv", "list", namespace="N")
    assert fake_client.admin("ns:1", "kv", "list", namespace="N", check=False) == failure


def test_queue_key_reads_the_crates_message_queue_keys():
    assert queue_key('{"topic":"T","brokerName":"broker-a","queueId":3}') == ("broker-a", 3)
