"""The short version of `make fuzz-native`: the C accelerator rebuilt with AddressSanitizer and UBSan,
fed the send_fastpath harness's corpus and a few thousand mutated and structured streams, each ending
at an unreadable page. A sanitizer report or a fault fails the test with the report."""

import pytest

from fuzz import native

pytestmark = pytest.mark.compiles  # gcc with AddressSanitizer and UBSan


def test_the_accelerator_under_asan_and_ubsan():
    try:
        r = native.run(seconds=5, limit=3000, seed=20261123)
    except native.Unavailable as e:
        pytest.skip(str(e))
    assert r.returncode == 0, f"sanitized fuzz run failed ({r.returncode}):\n{r.stderr[-6000:]}"
    assert "no sanitizer report" in r.stdout and "sends taken" in r.stdout, r.stdout
