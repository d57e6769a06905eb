"""Creating a SparkSession that can run mysqlcdc, and registering the source."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

__all__ = ["build_session", "register", "quiet_failures", "with_jit", "JIT_MODES",
           "check_master", "java_reason"]

# Quiet, small defaults for one machine; every key can be overridden by `conf`.
DEFAULT_CONF = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "1g",
    "spark.sql.streaming.stopTimeout": "30s",
    # a partitioned file sink (the changelog) writes each partition's file as rows come
    # instead of sorting the whole task's rows by partition first (memory, CPU)
    "spark.sql.maxConcurrentOutputFileWriters": "64",
    # PySpark's worker daemon, quiet about a task whose socket a stopping query closed
    "spark.python.daemon.module": "mysqlcdc.spark.daemon",
}


# The JVM's just-in-time compilers (DESIGN.md decision 22). ``quick``: C1 alone, for a JVM
# that only plans and commits while the read tasks write every row themselves (decision
# 20); its optimising compiler (C2) would spend more CPU compiling Spark's planning code
# than that code ever costs. ``full``: the JVM's default (C1, then C2 for hot code), for a
# JVM that moves rows: C1 alone about doubles its per-row work there.
JIT_MODES = ("full", "quick")
QUICK_JIT = "-XX:TieredStopAtLevel=1"
# a Java option among these is the user's own choice of compilers: left alone
_JIT_OPTIONS = ("TieredStopAtLevel", "TieredCompilation", "CompilationMode", "-Xint", "-Xcomp",
                "-Xmixed")
_JAVA_OPTION_KEYS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")


def with_jit(settings: Mapping[str, str], jit: str) -> dict[str, str]:
    """``settings`` with the Java options of the JIT mode ``jit`` (see ``JIT_MODES``) for
    the driver and the executors, unless their options already choose the compilers."""
    if jit not in JIT_MODES:
        raise ValueError(f"jit must be one of {JIT_MODES}, not {jit!r}")
    out = dict(settings)
    if jit == "full":
        return out
    for key in _JAVA_OPTION_KEYS:
        own = out.get(key, "")
        if not any(option in own for option in _JIT_OPTIONS):
            out[key] = f"{own} {QUICK_JIT}".strip()
    return out


# Java options that already choose the driver's logging configuration
_LOG_OPTIONS = ("log4j2.configurationFile", "log4j.configurationFile", "log4j.configuration")
# what log4j finds on the classpath, where Spark puts its configuration folder (a Spark
# distribution's ``log4j2.properties.template`` is none)
_LOG_FILES = tuple(f"{stem}.{ext}" for stem in ("log4j2-test", "log4j2")
                   for ext in ("properties", "yaml", "yml", "json", "jsn", "xml"))


def quiet_start(settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` with the driver JVM logging as ``log4j2.properties`` (next to this
    module) says: Spark's defaults, without the lines it prints on every start (the
    profile it loaded, the shell's log level, Hadoop's native library). Unless the user
    configured logging: their driver Java options name a configuration, or their Spark
    configuration folder has one."""
    out = dict(settings)
    own = out.get("spark.driver.extraJavaOptions", "")
    if any(option in own for option in _LOG_OPTIONS) or _user_log_config():
        return out
    path = Path(__file__).with_name("log4j2.properties")
    if path.is_file() and " " not in str(path):
        out["spark.driver.extraJavaOptions"] = \
            f"{own} -Dlog4j2.configurationFile={path.as_uri()}".strip()
    return out


def _user_log_config() -> bool:
    folders = [os.environ.get("SPARK_CONF_DIR")]
    if os.environ.get("SPARK_HOME"):
        folders.append(os.path.join(os.environ["SPARK_HOME"], "conf"))
    return any(folder and (Path(folder) / name).is_file()
               for folder in folders for name in _LOG_FILES)


def build_session(master: str = "local[*]", app_name: str = "mysqlcdc",
                  conf: Mapping[str, str] | None = None, *, jit: str = "full",
                  quiet_boot: bool = True):
    """Get or create a SparkSession with the mysqlcdc source registered.

    Python workers must run this interpreter (it has pyarrow and mysqlcdc), so
    PYSPARK_PYTHON is pinned to it before the JVM starts. ``jit``: the JVM's compilers
    (``JIT_MODES``); a session that exists already keeps its own. ``quiet_boot``: a JVM
    started here has its standard error passed on without the warning every Spark 4 JVM
    prints at its boot (``_launch_driver_jvm``); else it writes to this process's own.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")   # stay on loopback
    from pyspark.sql import SparkSession

    from mysqlcdc.spark import warmstart

    settings = quiet_start(with_jit({**DEFAULT_CONF, **(conf or {})}, jit))
    cache = warmstart.cache_dir() if warmstart.enabled() else None
    if cache is not None:
        home = warmstart.spark_home(cache)
        if home is not None:
            os.environ["SPARK_HOME"] = str(home)
        options = warmstart.java_options(cache, str(home) if home else None,
                                         settings.get(warmstart.JAVA_OPTIONS, ""))
        if options:
            settings[warmstart.JAVA_OPTIONS] = options
    _light_numpy_converter()
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        if not _jvm_running():
            check_master(master)
            if quiet_boot:
                _launch_driver_jvm(master, app_name, settings)
        spark = builder.getOrCreate()
        if cache is not None:
            warmstart.after_start(spark)
        spark.sparkContext.setLogLevel("ERROR")
        # py4j's DEBUG log has every call into the JVM with its arguments, among them the
        # source's password option: never below INFO, whatever the root logger says
        import logging

        bridge = logging.getLogger("py4j")
        if bridge.level == logging.NOTSET or bridge.level < logging.INFO:
            bridge.setLevel(max(logging.INFO, logging.getLogger().getEffectiveLevel()))
        register(spark)              # the session's state is made here: a bad conf shows
    except Exception as exc:
        from mysqlcdc.errors import MysqlcdcError, SparkStartError

        if isinstance(exc, MysqlcdcError):
            raise
        if getattr(exc, "getCondition", lambda: None)() == "JAVA_GATEWAY_EXITED":
            raise SparkStartError("the Spark driver's JVM ended before it started "
                                  f"(master {master})") from None
        reason = java_reason(exc)
        if reason is None:
            raise
        raise SparkStartError(f"Spark did not start the session (master {master}): "
                              f"{reason}") from exc
    return spark


# What the JVM prints at its boot because Spark's launcher always adds this incubating module
# to the driver's options (only the ML library's linear algebra uses it): a warning about
# nothing a user can act on, on every start of a pipeline
_BOOT_NOISE = (b"WARNING: Using incubator modules: jdk.incubator.vector",)


def java_reason(exc: BaseException) -> str | None:
    """The first line of the innermost Java exception behind ``exc`` (a Spark error raised
    in the JVM), such as ``[INVALID_CONF_VALUE.TYPE_MISMATCH] The value 'abc' in the config
    "spark.sql.shuffle.partitions" is invalid...``; None when ``exc`` is not one."""
    error = getattr(exc, "_origin", None) or getattr(exc, "java_exception", None)
    if error is None:
        return None
    try:
        for _ in range(20):
            cause = error.getCause()
            if cause is None:
                break
            error = cause
        text = str(error.getMessage() or error.getClass().getName())
    except Exception:  # noqa: BLE001 - the JVM is gone: Python's own text then
        return None
    return text.strip().splitlines()[0] if text.strip() else None


def _jvm_running() -> bool:
    """A driver JVM this process can use exists already (made here, or by ``spark-submit``
    that started this process)."""
    from pyspark import SparkContext

    return SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ


def check_master(master: str, timeout_s: float = 5.0) -> None:
    """A standalone master (``spark://host:port``, several comma-separated for a standby)
    must accept a connection, else ``SparkMasterUnreachableError`` at once: Spark's own
    client tries for a minute, prints a stack trace at each attempt and then fails with an
    error about a stopped SparkContext. Other masters are Spark's to check."""
    import socket

    from mysqlcdc.config.fields import standalone_addresses
    from mysqlcdc.errors import ConfigError, SparkMasterUnreachableError

    try:
        addresses = standalone_addresses(master)
    except ValueError as exc:
        raise ConfigError(f"spark.master {master!r}: {exc}") from None
    if not addresses:
        return
    problems = []
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return
        except OSError as exc:
            problems.append(f"{host}:{port}: {exc.strerror or exc}")
    raise SparkMasterUnreachableError(f"no Spark master answers at {master} "
                                      f"({'; '.join(problems)})")


def _launch_driver_jvm(master: str, app_name: str, settings: Mapping[str, str]) -> None:
    """Start the driver JVM as ``SparkSession.builder`` would, its standard error passed on
    by a thread that leaves out ``_BOOT_NOISE`` (when none runs yet: ``_jvm_running``)."""
    import threading

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    conf = SparkConf()
    for key, value in {**settings, "spark.master": master, "spark.app.name": app_name}.items():
        conf.set(key, value)
    try:
        read_end, write_end = os.pipe()
    except OSError:
        return
    try:
        target = os.dup(2)                       # where the JVM's standard error went before
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return
    passer = threading.Thread(target=_pass_on, args=(os.fdopen(read_end, "rb"), target),
                              daemon=True, name="driver-jvm-stderr")
    passer.start()
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": write_end})
    except BaseException:
        os.close(write_end)
        passer.join(timeout=2.0)                 # what the JVM said before it ended, first
        raise
    os.close(write_end)                          # the JVM (and its workers) hold it now
    SparkContext._ensure_initialized(gateway=gateway)


def _pass_on(source, target: int) -> None:
    """Copy the JVM's standard error (and its Python workers', which inherit it) to
    ``target`` line by line, without ``_BOOT_NOISE``. Reads to the end whatever happens, so
    that the JVM never blocks writing to a full pipe."""
    failed = False
    try:
        for line in source:
            if failed or line.rstrip().startswith(_BOOT_NOISE):
                continue
            view = memoryview(line)
            try:
                while view:
                    view = view[os.write(target, view):]
            except OSError:
                failed = True                    # nowhere to write: keep draining
    finally:
        source.close()
        try:
            os.close(target)
        except OSError:
            pass


def _light_numpy_converter() -> None:
    """pyspark's py4j converters for numpy values learn whether numpy is installed by
    importing ``pyspark.testing.utils`` at the first call into the JVM that has an
    argument, and that imports pandas and more (0.8 CPU s, in the middle of the JVM's
    start). These ask the argument alone: a numpy value is only there if numpy is."""
    from py4j import protocol
    from pyspark.sql.types import NumpyArrayConverter, NumpyScalarConverter

    class _Array(NumpyArrayConverter):
        def can_convert(self, obj) -> bool:
            np = sys.modules.get("numpy")
            return np is not None and isinstance(obj, np.ndarray) and obj.ndim == 1

    class _Scalar(NumpyScalarConverter):
        def can_convert(self, obj) -> bool:
            np = sys.modules.get("numpy")
            return np is not None and isinstance(obj, np.generic)

    light = {NumpyArrayConverter: _Array, NumpyScalarConverter: _Scalar}
    converters = protocol.INPUT_CONVERTER
    converters[:] = [light[type(c)]() if type(c) in light else c for c in converters]


# Loggers that print a failed query's or task's whole Java and Python stack to stderr.
# The CLI names the mysqlcdc error inside in one line; --verbose keeps these.
_FAILURE_LOGGERS = (
    "org.apache.spark.sql.execution.streaming",
    "org.apache.spark.sql.execution.datasources.FileFormatWriter",
    "org.apache.spark.sql.execution.datasources.v2",
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.api.python",
    # "Aborting task" with the task's stack, from a file writer with concurrent writers
    "org.apache.spark.util.Utils",
)


def quiet_failures(spark) -> None:
    """Silence the loggers that dump a failed query's stack (see ``_FAILURE_LOGGERS``), and
    py4j's report of an exception in a ``foreachBatch`` function (the query fails with it;
    the caller names it)."""
    import logging

    logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
    try:
        jvm = spark.sparkContext._jvm
        off = jvm.org.apache.logging.log4j.Level.OFF
        for name in _FAILURE_LOGGERS:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, off)
    except Exception:   # noqa: BLE001 - only cosmetics; never fail a run for it
        pass


def register(spark) -> None:
    """Make ``format("mysqlcdc")`` available in this session."""
    from mysqlcdc.spark.source import MysqlcdcDataSource

    spark.dataSource.register(MysqlcdcDataSource)
    settle_source_environment(spark, MysqlcdcDataSource.name())


# The keys Spark's driver-side runner of a Python streaming source puts into the registered
# source's environment map when a streaming query starts (pyspark 4: into that one map,
# shared by every query of the session, not into a copy). Every runner puts its own value
# of each before its Python worker starts, so these values only stand in until then.
_STREAMING_RUNNER_KEYS = {"SPARK_LOCAL_DIRS": tempfile.gettempdir(),
                          "SPARK_AUTH_SOCKET_TIMEOUT": "15", "SPARK_BUFFER_SIZE": "65536",
                          "SPARK_PYTHON_RUNTIME": "PYTHON_WORKER"}


def settle_source_environment(spark, name: str) -> None:
    """Put the keys a starting streaming query adds into the source's environment map now.

    Every read task of a query carries that same map, serialized on the scheduler's
    thread. When a second query starts while the first one's task is serialized, the
    runner's first ``put`` of a key grows the map mid-write, and the task cannot be read
    back (``java.io.OptionalDataException``: the query fails). A pipeline with several
    sinks starts several queries at once. With every key present before the first query
    starts, a later ``put`` only replaces a value, which leaves the map's layout as it is."""
    try:
        source = spark._jsparkSession.sessionState().dataSourceManager().lookupDataSource(name)
        env = source.dataSourceCls().envVars()
        for key, value in _STREAMING_RUNNER_KEYS.items():
            if not env.containsKey(key):
                env.put(key, value)
    except Exception as exc:  # noqa: BLE001 - another Spark: leave its map as it is
        import logging

        logging.getLogger(__name__).warning("the mysqlcdc source's environment was not "
                                            "settled (%s); several queries starting at once "
                                            "may fail to read a task", exc)


# Spark writes a streaming checkpoint's files (offsets, commits, metadata) through Hadoop's
# FileContext by default. On a local disk without Hadoop's native library (pip's pyspark
# has none) every rename there starts a ``readlink`` process, about 18 of them a
# micro-batch; through Hadoop's FileSystem the same files are written and renamed in
# place the same way (create a temporary file, rename it onto a name that must not exist)
# without them. Remote stores keep Spark's default.
CHECKPOINT_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
PLAIN_CHECKPOINT_MANAGER = ("org.apache.spark.sql.execution.streaming.checkpointing."
                            "FileSystemBasedCheckpointFileManager")


def plain_local_checkpoints(spark, checkpoints: Sequence[str]) -> bool:
    """Before queries start: write their checkpoints through Hadoop's FileSystem when every
    one of ``checkpoints`` is on a local disk and this Spark has the class; else Spark's
    default. A checkpoint file manager the user chose is left alone. Returns whether the
    queries started next use the plain one."""
    from mysqlcdc.spark.checkpoint import local_dir

    chosen = spark.conf.get(CHECKPOINT_MANAGER, None)
    if chosen and chosen != PLAIN_CHECKPOINT_MANAGER:
        return False                                     # the user's
    if not checkpoints or any(local_dir(c) is None for c in checkpoints):
        if chosen:
            spark.conf.unset(CHECKPOINT_MANAGER)         # ours, from a local pipeline before
        return False
    if chosen:
        return True
    try:
        if not spark.sparkContext._jvm.org.apache.spark.util.Utils.classIsLoadable(
                PLAIN_CHECKPOINT_MANAGER):
            return False
    except Exception:  # noqa: BLE001 - another Spark: its default stays
        return False
    spark.conf.set(CHECKPOINT_MANAGER, PLAIN_CHECKPOINT_MANAGER)
    return True
