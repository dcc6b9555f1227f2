"""The tiers' markers. Every test that takes the pipeline's Spark session (the `spark` fixture,
tests/unit/pipeline/conftest.py) is marked `spark` here; tests that start a JVM or a compiler some
other way carry their marker (`compiles`) themselves. Every other test under tests/unit is marked
`fast`: the tier `make test-unit` runs, and the one `make test` runs first, so a broken build fails in
a minute instead of after the cluster tests."""

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items):
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
        if HERE in Path(str(item.path)).resolve().parents and not any(
            item.get_closest_marker(m) for m in ("spark", "compiles")
        ):
            item.add_marker(pytest.mark.fast)
