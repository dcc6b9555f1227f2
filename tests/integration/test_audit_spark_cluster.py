"""The audit on a real standalone Spark cluster: a master and a worker started from the installed PySpark
(spark-class ...deploy.master.Master / ...deploy.worker.Worker, as processes through rmqha/cluster/process.py),
and `spark-submit --master spark://... rmqha/pipeline/__main__.py RUN` given a RELATIVE run folder from another
working directory than the executors' (theirs is the worker's work dir): its verdicts must be the local
run's, line for line. The run folder is built as the pipeline unit tests build theirs (the real
MessageStore): a master, a byte-identical slave, and a history with one acknowledged send that is on
no node, so both runs must also agree on a FAIL."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from rmqha.cluster.ports import free_block
from rmqha.cluster.process import spawn, stop
from rmqha.cluster.wait import wait_until
from tests.unit.pipeline.conftest import RunBuilder

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
VERDICTS = ("PASS", "WARN", "FAIL", "INFO")


def spark_env() -> dict:
    env = dict(os.environ)
    # The venv's spark-class finds its Spark home through the python3 on PATH (find-spark-home).
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env.pop("SPARK_MASTER", None)
    return env


def verdict_lines(stdout: str) -> list[str]:
    return [l for l in stdout.splitlines() if l[:4].strip() in VERDICTS and l[4:6] == "  "]


@pytest.fixture
def spark_cluster(tmp_path):
    """A standalone master and one worker (1 core, 1 GiB) on loopback; stopped at the end."""
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java: the Spark master and worker need Java 17 (apt-get install openjdk-17-jre-headless)")
    spark_class = VENV_BIN / "spark-class"
    if not spark_class.exists():
        pytest.skip(f"{spark_class} not found: `make venv` installs PySpark")
    port, ui = free_block(1), free_block(2)
    env = spark_env()
    url = f"spark://127.0.0.1:{port}"
    master = spawn(
        [
            str(spark_class),
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui),
        ],
        tmp_path / "spark-master.log",
        env,
    )
    worker = None
    try:
        worker = spawn(
            [
                str(spark_class),
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                str(ui + 1),
                "--work-dir",
                str(tmp_path / "spark-work"),
            ],
            tmp_path / "spark-worker.log",
            env,
        )

        def alive_workers():
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
                return sum(1 for w in json.loads(r.read())["workers"] if w["state"] == "ALIVE")

        def logs():
            return "\n".join(
                f"--- {p.name} ---\n" + p.read_text(errors="replace")[-2000:] for p in tmp_path.glob("spark-*.log")
            )

        wait_until(alive_workers, 120, f"a Spark worker registered with {url}", interval=0.5, on_timeout=logs)
        yield url
    finally:
        for rec in (worker, master):
            if rec:
                stop(rec, timeout=10)


@pytest.mark.timeout(900)
def test_audit_on_a_standalone_spark_cluster_matches_the_local_run(tmp_path, spark_cluster):
    b = RunBuilder(tmp_path / "run")
    b.master(n=200)
    b.close()
    b.slave()
    b.history(lost=[("LOST-UNIQ-1", "LOST-SEND-1")])
    env = spark_env()
    pipeline_main = str(ROOT / "rmqha" / "pipeline" / "__main__.py")

    cluster_run = subprocess.run(
        [
            str(VENV_BIN / "spark-submit"),
            "--master",
            spark_cluster,
            "--conf",
            "spark.executor.memory=512m",
            "--conf",
            "spark.driver.memory=512m",
            # Spark's 200 shuffle partitions are 200 tasks per shuffle on one worker core (the pipeline
            # lowers them only for local masters): minutes instead of seconds here.
            "--conf",
            "spark.sql.shuffle.partitions=4",
            pipeline_main,
            "run",
            "--out",
            "report-cluster",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert cluster_run.returncode in (0, 1), cluster_run.stdout + cluster_run.stderr[-5000:]
    assert f"spark master: {spark_cluster}" in cluster_run.stdout

    local_run = subprocess.run(
        [
            sys.executable,
            "-m",
            "rmqha.pipeline",
            str(tmp_path / "run"),
            "--master",
            "local[1]",
            "--out",
            str(tmp_path / "report-local"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert local_run.returncode in (0, 1), local_run.stdout + local_run.stderr[-5000:]

    on_cluster, local = verdict_lines(cluster_run.stdout), verdict_lines(local_run.stdout)
    assert on_cluster and on_cluster == local
    assert cluster_run.returncode == local_run.returncode == 1
    assert any(l.startswith("FAIL") and "lost" in l for l in on_cluster), on_cluster
    assert (tmp_path / "report-cluster" / "report.md").exists()
