"""A sink's batch function cut short by its query's stop: Spark must read the error as the
stop, without the JVM's regular expression overflowing the stream thread's stack."""

from __future__ import annotations

import pytest

from mysqlcdc.spark.stopping import QueryInterrupted, interruption, quiet_on_stop

pytestmark = pytest.mark.integration

# the expression Spark 4's stream execution matches a Python error's text with to decide
# that the query was stopped rather than failed (StreamExecution.isInterruptionException)
SPARK_VERDICT = ("py4j.protocol.Py4JJavaError: An error occurred while calling"
                 "((.|\\r\\n|\\r|\\n)*)(java.lang.InterruptedException|"
                 "java.io.InterruptedIOException|java.nio.channels.ClosedByInterruptException)")


class Py4JJavaError(Exception):
    """Named as py4j's: what a call into the JVM raises (its text is the Java stack)."""


def _java_stack(cause: str, frames: int = 400) -> str:
    return ("An error occurred while calling o431.getResult.\n: org.apache.spark.SparkException: "
            "Exception thrown in awaitResult:\n"
            + "\tat org.apache.spark.util.SparkThreadUtils$.awaitResult(SparkThreadUtils.scala:70)\n"
            * frames + f"Caused by: {cause}\n\tat java.base/java.util.concurrent.locks.Abstract"
            "QueuedSynchronizer.acquireSharedInterruptibly(AbstractQueuedSynchronizer.java:1048)\n")


def _python_traceback(err: BaseException) -> str:
    """The text py4j hands the JVM for an exception a Python callback raised."""
    return ("Traceback (most recent call last):\n  File \"x.py\", line 1, in call\n"
            f"py4j.protocol.{type(err).__name__}: {err}\n")


def _spark_verdict(spark, text: str):
    matcher = spark._jvm.java.util.regex.Pattern.compile(SPARK_VERDICT).matcher(text)
    return matcher.find()


def test_an_interrupted_jvm_call_is_told_in_one_line_that_spark_reads_as_the_stop(spark):
    raw = Py4JJavaError(_java_stack("java.lang.InterruptedException"))
    with pytest.raises(Exception, match="StackOverflowError"):
        _spark_verdict(spark, _python_traceback(raw))        # what the stream thread met
    short = interruption(raw)
    assert isinstance(short, QueryInterrupted) and len(str(short)) < 200
    assert _spark_verdict(spark, _python_traceback(short)) is True


def test_a_job_the_stop_cancelled_is_the_stop_too(spark):
    raw = Py4JJavaError(_java_stack("org.apache.spark.SparkException: [SPARK_JOB_CANCELLED] Job 36 "
                                    "cancelled Query p-1-mirror [id = 9] was stopped"))
    short = interruption(raw)
    assert short is not None and _spark_verdict(spark, _python_traceback(short)) is True


def test_other_errors_pass_through_unchanged():
    failed = Py4JJavaError(_java_stack("java.io.IOException: No space left on device"))
    assert interruption(failed) is None
    assert interruption(RuntimeError("java.lang.InterruptedException")) is None

    def batch(df, batch_id):
        if batch_id == 1:
            raise failed
        if batch_id == 2:
            raise Py4JJavaError(_java_stack("java.nio.channels.ClosedByInterruptException"))
        return batch_id * 10

    run = quiet_on_stop(batch)
    assert run(None, 0) == 0
    with pytest.raises(Py4JJavaError) as err:
        run(None, 1)
    assert err.value is failed
    with pytest.raises(QueryInterrupted, match="ClosedByInterruptException"):
        run(None, 2)


def test_python_workers_run_under_the_quiet_daemon(spark):
    """The session's Python tasks are forked by mysqlcdc's daemon (a worker inherits its
    command line), which ends a worker whose socket the JVM closed without a traceback."""
    lines = spark.sparkContext.parallelize([0], 1).map(
        lambda _: open("/proc/self/cmdline", "rb").read().split(b"\0")).collect()
    assert b"mysqlcdc.spark.daemon" in lines[0]


def test_the_quiet_daemon_passes_every_other_error_on(monkeypatch):
    import mysqlcdc.spark.daemon as daemon

    def closed(sock, authenticated):
        raise BrokenPipeError(32, "Broken pipe")

    def broken(sock, authenticated):
        raise ValueError("a worker's own failure")
    monkeypatch.setattr(daemon, "_worker", closed)
    assert daemon.quiet_worker(None, True) == 1
    monkeypatch.setattr(daemon, "_worker", broken)
    with pytest.raises(ValueError):
        daemon.quiet_worker(None, True)


def test_the_schedulers_rejection_at_a_stop_is_not_printed(spark):
    """A stop that lands while a task runs: the JVM's shutdown ends the pool that takes
    task results, and the scheduler logged that rejection with its whole stack (noise: the
    stop is clean). The driver's logging (log4j2.properties) drops that one message; the
    scheduler's others (a lost executor) still print."""
    jvm = spark.sparkContext._jvm
    name = "org.apache.spark.scheduler.TaskSchedulerImpl"
    config = jvm.org.apache.logging.log4j.LogManager.getContext(False).getConfiguration()
    logger = config.getLoggerConfig(name)
    assert logger.getName() == name

    def event(text):
        return (jvm.org.apache.logging.log4j.core.impl.Log4jLogEvent.newBuilder()
                .setLoggerName(name).setLevel(jvm.org.apache.logging.log4j.Level.ERROR)
                .setMessage(jvm.org.apache.logging.log4j.message.SimpleMessage(text)).build())

    assert logger.isFiltered(event("Exception in statusUpdate"))
    assert not logger.isFiltered(event("Lost executor 2 on 127.0.0.1: Command exited with code 137"))
