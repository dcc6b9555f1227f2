"""The audit's Python worker daemon (rmqha/pipeline/spark_daemon.py) and the JVM classes get_spark pins
(rmqha/pipeline/spark.py): the path order and preload without a JVM, the pins and the daemon on one."""

from rmqha.pipeline import spark_daemon
from rmqha.pipeline.spark import PINNED_JVM_CLASSES, pin_jvm_classes


def _site(tmp_path, with_pyspark=True):
    site = tmp_path / "site-packages"
    (site / "pyspark").mkdir(parents=True)
    if with_pyspark:
        (site / "pyspark" / "__init__.py").write_text("")
    return str(site)


def test_spark_zips_go_after_an_installed_pyspark(tmp_path):
    site = _site(tmp_path)
    path = ["/spark/python/lib/pyspark.zip", "/spark/python/lib/py4j-0.10.9.7-src.zip", "/work", site]
    assert spark_daemon.prefer_installed(path) == [
        "/work",
        site,
        "/spark/python/lib/pyspark.zip",
        "/spark/python/lib/py4j-0.10.9.7-src.zip",
    ]


def test_without_an_installed_pyspark_the_path_is_unchanged(tmp_path):
    # a directory named pyspark that is not a package does not count: a cluster's workers keep Spark's zips
    path = ["/spark/python/lib/pyspark.zip", "/spark/python/lib/py4j-0.10.9.7-src.zip", _site(tmp_path, False)]
    assert spark_daemon.prefer_installed(path) == path


def test_other_zips_keep_their_place(tmp_path):
    site = _site(tmp_path)
    path = ["/deps/app.zip", "/spark/python/lib/pyspark.zip", site]
    assert spark_daemon.prefer_installed(path) == ["/deps/app.zip", site, "/spark/python/lib/pyspark.zip"]


def test_preload_reports_what_it_could_not_import():
    assert spark_daemon.preload(("json", "no_such_module_rmqha")) == ["no_such_module_rmqha"]


def test_pinned_classes_are_held_by_the_jvm_view_and_still_work(spark):
    from pyspark.sql import functions as F

    jvm = spark.sparkContext._jvm
    assert {n: vars(jvm)[n]._fqn for n in PINNED_JVM_CLASSES} == PINNED_JVM_CLASSES
    pinned = vars(jvm)["functions"]
    pin_jvm_classes(spark.sparkContext)  # another session on the same JVM keeps the first pins
    assert vars(jvm)["functions"] is pinned
    df = spark.range(3).select((F.col("id") * F.lit(2)).alias("x"))
    assert [r.x for r in df.collect()] == [0, 2, 4]


def test_the_workers_fork_from_our_daemon(spark):
    assert spark.conf.get("spark.python.daemon.module") == "rmqha.pipeline.spark_daemon"
    rows = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("sys").modules.get("pyarrow") is not None)
    assert rows.collect() == [True]  # imported by the daemon before the fork, not by this task
