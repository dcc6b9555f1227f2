"""The session the tests and small audits get: a driver JVM started for short work (rmqha/pipeline/spark.py)."""

from rmqha.pipeline.spark import QUICK_JVM_OPTIONS, launch_quick_jvm


def test_a_quick_session_runs_its_driver_with_c1_and_the_serial_collector(spark):
    # the package's session asked for quick_jvm: its driver was launched with the options, and a second
    # launch does nothing (the JVM is there)
    assert QUICK_JVM_OPTIONS in spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
    args = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
    assert {"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"} <= set(args)
    assert launch_quick_jvm() is False
