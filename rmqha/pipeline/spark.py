"""One place that builds the SparkSession, so every entry point picks the master the same way.

Master, first match wins:
  1. the `master` argument (the CLI's --master);
  2. `spark.master` already in the JVM's configuration: spark-submit --master, or
     PYSPARK_SUBMIT_ARGS="--master ... pyspark-shell", or spark-defaults.conf;
  3. the SPARK_MASTER environment variable;
  4. local[*].
"""

from __future__ import annotations

import os
import sys
import tempfile
import zipfile

DEFAULT_MASTER = "local[*]"
# A driver JVM that lives for one small audit spends about half of its CPU compiling with C2 and
# collecting with parallel GC threads that never pay back: with C1 only and the serial collector, the
# audit of a one-minute chaos run took 39-42 s of CPU instead of 76-82 s on this project's 2-core machine.
# C1 alone gets a 48 MB code cache by default: Spark compiles generated code for every query, and after
# 5-8 small audits in one JVM (a test worker, `python -m rmqha.pipeline` over several runs) the cache was
# full, the JVM logged "CodeCache is full. Compiler has been disabled" and ran everything interpreted.
QUICK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=256m"
# Above this much commit log on disk (files are preallocated: four nodes of one 1 GiB file each is a small
# run), C2's faster code is worth its compile time.
QUICK_JVM_MAX_BYTES = 4 << 30
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pick_master(explicit: str | None, submitted: str | None, env: dict) -> str:
    """The precedence rule alone: explicit, then spark-submit's spark.master, then $SPARK_MASTER."""
    return explicit or submitted or env.get("SPARK_MASTER") or DEFAULT_MASTER


def resolve_master(explicit: str | None = None) -> str:
    if explicit:
        return explicit
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # starts the JVM (via spark-submit) so its conf is visible
    conf = SparkConf()  # loads spark.* system properties from that JVM
    submitted = conf.get("spark.master") if conf.contains("spark.master") else None
    return pick_master(None, submitted, os.environ)


def launch_quick_jvm() -> bool:
    """Start the driver JVM with QUICK_JVM_OPTIONS, unless a JVM is already there (spark-submit, an earlier
    session) or the user set driver options. Returns whether it did."""
    from pyspark import SparkConf, SparkContext

    if SparkContext._gateway is not None or os.environ.get("PYSPARK_GATEWAY_PORT"):
        return False
    if "driver-java-options" in os.environ.get("PYSPARK_SUBMIT_ARGS", ""):
        return False
    SparkContext._ensure_initialized(
        conf=SparkConf(loadDefaults=False).set("spark.driver.extraJavaOptions", QUICK_JVM_OPTIONS)
    )
    return True


def get_spark(
    app_name: str = "rocketmq-audit", master: str | None = None, conf: dict | None = None, quick_jvm: bool = False
):
    """quick_jvm: the session is for a small, short job (a test, one chaos run's audit): see QUICK_JVM_OPTIONS."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if quick_jvm:
        launch_quick_jvm()
    chosen = resolve_master(master)
    builder = SparkSession.builder.appName(app_name).master(chosen)
    defaults = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "false",
    }
    if chosen.startswith("local"):
        # 200 shuffle partitions cost a task each on one machine: a small run's audit took 12 s longer.
        defaults["spark.sql.shuffle.partitions"] = str(max(4, 2 * (os.cpu_count() or 2)))
        if quick_jvm:
            # adaptive execution re-plans every shuffle: ~10 % of a small audit's CPU, for nothing to re-plan
            defaults["spark.sql.adaptive.enabled"] = "false"
            # every action formats its physical plan for the SQL UI's listener, UI or not: "formatted" walks
            # the plan twice more (operator ids, then details) and was ~4 % of a small audit's CPU (JFR)
            defaults["spark.sql.ui.explainMode"] = "simple"
        # workers forked from a daemon that imported what they need, pyspark with its bytecode (spark_daemon.py)
        defaults["spark.python.daemon.module"] = "rmqha.pipeline.spark_daemon"
    from pyspark import SparkConf

    submitted = SparkConf()  # spark-submit --conf / spark-defaults.conf win over our defaults
    defaults = {k: v for k, v in defaults.items() if not submitted.contains(k)}
    # pyspark's launcher marks every driver a shell (showConsoleProgress=true): progress bars would
    # interleave with the audit's output and the chaos matrix's log
    forced = {"spark.ui.showConsoleProgress": "false"}
    for k, v in {**defaults, **forced, **(conf or {})}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    pin_jvm_classes(spark.sparkContext)
    if not spark.sparkContext.master.startswith("local"):
        ship_code(spark)
    return spark


# The JVM classes pyspark looks up by short name on every column expression (functions.col, lit, ...) and
# every Python function it ships (PythonUtils). py4j resolves a short name on each use by trying it under
# every imported package, and each miss makes the class loader search every jar on Spark's class path
# (~250): JFR on a 300-message report.run found 18 % of the driver's py4j thread CPU in those misses.
PINNED_JVM_CLASSES = {
    "functions": "org.apache.spark.sql.functions",
    "PythonUtils": "org.apache.spark.api.python.PythonUtils",
    "PythonSQLUtils": "org.apache.spark.sql.api.python.PythonSQLUtils",
    "SparkSession": "org.apache.spark.sql.SparkSession",
}


def pin_jvm_classes(sc) -> None:
    """Resolve PINNED_JVM_CLASSES once and keep them on the context's JVM view: py4j's view only asks the
    JVM for names it does not hold as attributes."""
    from py4j.java_gateway import JavaClass

    jvm = sc._jvm
    for name, fqn in PINNED_JVM_CLASSES.items():
        if name not in vars(jvm):
            vars(jvm)[name] = JavaClass(fqn, sc._gateway._gateway_client)


def ship_code(spark) -> str:
    """Zip `rmqha` (its broker, cluster and pipeline packages) and hand them to the executors (non-local masters)."""
    path = os.path.join(tempfile.mkdtemp(prefix="rmq-pipeline-"), "rmq_pipeline_code.zip")
    with zipfile.ZipFile(path, "w") as zf:
        zf.write(os.path.join(_ROOT, "rmqha", "__init__.py"), "rmqha/__init__.py")
        for pkg in ("broker", "cluster", "pipeline"):
            for dirpath, _, names in os.walk(os.path.join(_ROOT, "rmqha", pkg)):
                for n in names:
                    if n.endswith(".py"):
                        full = os.path.join(dirpath, n)
                        zf.write(full, os.path.relpath(full, _ROOT))
    spark.sparkContext.addPyFile(path)
    return path


def lit_map(d: dict, value_type: str | None = None):
    """A literal map column {key: value}: look a small driver-side table up with `lit_map(d)[col]` (null
    when absent) instead of joining a DataFrame made of it; the join costs a Spark job to broadcast the
    table, on every action that plans it. Values may be Columns (structs, arrays)."""
    from pyspark.sql import functions as F

    def lit(v):
        c = v if isinstance(v, F.Column) else F.lit(v)
        return c.cast(value_type) if value_type else c

    if not d:
        return F.create_map().cast(f"map<string,{value_type or 'string'}>")
    return F.create_map(*[x for k, v in d.items() for x in (F.lit(k), lit(v))])
