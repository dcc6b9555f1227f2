"""The fast tier's markers (make test-unit runs `-m "not spark and not compiles"`): every test that takes the
pipeline's Spark session (the `spark` fixture, tests/unit/pipeline/conftest.py) is marked `spark` here;
tests that start a JVM or a compiler some other way carry their marker themselves."""
import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
