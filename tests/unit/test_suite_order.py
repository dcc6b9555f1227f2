"""tests/conftest.py's hand-out order: the longest files first, and while the Rust client is still being
built in the background, every file that drives it last (so no worker waits on the compiler)."""

from __future__ import annotations

from tests import conftest


def test_the_files_that_drive_the_rust_client_are_found_by_their_text():
    assert conftest.uses_rust_client("tests/integration/test_rust_client.py")
    assert conftest.uses_rust_client("tests/integration/test_dledger_rust_failover.py")  # --client rust
    assert conftest.uses_rust_client("tests/integration/test_message_trace.py")
    assert not conftest.uses_rust_client("tests/integration/test_delay_levels.py")
    assert not conftest.uses_rust_client("tests/integration/no_such_file.py")


def test_a_pending_build_is_seen_unless_a_binary_is_given(monkeypatch, tmp_path):
    monkeypatch.setattr(conftest, "RUST_BIN", tmp_path / "absent")
    monkeypatch.delenv("RUST_CLIENT_BIN", raising=False)
    assert conftest.rust_client_pending()
    monkeypatch.setenv("RUST_CLIENT_BIN", "/elsewhere/rmq-rust-client")
    assert not conftest.rust_client_pending()
    built = tmp_path / "built"
    built.write_text("#!/bin/sh\n")
    built.chmod(0o755)
    monkeypatch.delenv("RUST_CLIENT_BIN")
    monkeypatch.setattr(conftest, "RUST_BIN", built)
    assert not conftest.rust_client_pending()
