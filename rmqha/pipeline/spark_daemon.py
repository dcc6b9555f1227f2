"""The Python worker daemon of the audit's local Spark sessions (spark.python.daemon.module): pyspark's own
daemon, with what every worker needs imported once, before it forks workers.

pyspark's daemon forks a worker per concurrent task slot and forks again whenever a worker was not reused
(an iterator left unfinished, an idle worker reaped). Each fork imported the Arrow serializers, pyarrow and
our decoder afresh, and imported pyspark's modules from pyspark.zip, which Spark puts first on the worker's
path: zipimport keeps no bytecode, so every module was compiled from source in every worker. Profiled on
a 300-message report.run (py-spy, 50 Hz, the driver and its workers): the workers spent more time importing
than decoding. Here pyspark comes from site-packages (its cached bytecode) when the same pyspark is
installed there, and the imports happen once in the daemon; the forks share them.

Tests: tests/unit/pipeline/test_spark_daemon.py.
"""

from __future__ import annotations

import os
import sys


def _is_spark_zip(path: str) -> bool:
    name = os.path.basename(path)
    return path.endswith(".zip") and (name == "pyspark.zip" or name.startswith("py4j-"))


def installed_elsewhere(path: list[str], package: str = "pyspark") -> bool:
    """Whether `package` is importable from a directory on `path` (not from a zip)."""
    return any(os.path.isfile(os.path.join(p, package, "__init__.py")) for p in path if p and not p.endswith(".zip"))


def prefer_installed(path: list[str]) -> list[str]:
    """`path` with Spark's zips (pyspark.zip, py4j-*.zip) moved to its end when pyspark is also installed
    as a directory on it: the same modules, with bytecode. Unchanged otherwise (a cluster's workers)."""
    if not installed_elsewhere(path):
        return list(path)
    return [p for p in path if not _is_spark_zip(p)] + [p for p in path if _is_spark_zip(p)]


PRELOAD = (
    "pyspark.worker",
    "pyspark.sql.pandas.serializers",
    "pyspark.sql.pandas.types",
    "pyarrow",
    "pyarrow.compute",
    "numpy",
    "rmqha.pipeline.decode",
    "rmqha.pipeline.audit",
)


def preload(modules=PRELOAD) -> list[str]:
    """Import what the workers will; returns the ones that could not be imported (each is then imported
    by the worker that needs it, as before)."""
    import importlib

    missing = []
    for m in modules:
        try:
            importlib.import_module(m)
        except Exception:  # optional parts (pyarrow, numba) may be absent: the worker copes as before
            missing.append(m)
    return missing


def main() -> None:
    sys.path[:] = prefer_installed(sys.path)
    for p in list(sys.path_importer_cache):
        if _is_spark_zip(p) and installed_elsewhere(sys.path):
            del sys.path_importer_cache[p]  # nothing was imported from it: no zip directory to re-read per task
    preload()
    from rmqha.pipeline import decode

    decode._lazy_zip_invalidation()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
