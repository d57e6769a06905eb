"""A shorter start for every mysqlcdc process that runs Spark.

Three costs are paid on every start and are the same each time:

* **pyspark compiled again in every Python worker.** When SPARK_HOME is the pip-installed
  pyspark package, Spark puts ``python/lib/pyspark.zip`` first on its Python workers'
  path (the planner processes of the data source, the read tasks' daemon). Python keeps
  no bytecode for modules imported from a zip, so each of those processes compiles
  pyspark's modules again: about half a CPU second each, several of them in a row before
  the first batch. ``spark_home`` gives Spark a SPARK_HOME made of links to the package's
  own folders, without ``python/``: the workers then import the installed package (the
  same files) and its cached bytecode.
* **Spark's ML functions registered in every session.** The ML library's jar names a
  session extension that the JVM's service loader finds on the classpath: every new
  session then registers ML functions through Scala's runtime reflection, a third of a
  CPU second of the JVM's first second, for functions a pipeline never calls. That
  SPARK_HOME's ``jars`` folder links every jar of the package but that one.
* **The driver JVM loading and verifying Spark's classes.** A class-data archive (the
  JDK's application class-data sharing, written by the JVM itself at its exit) maps them
  ready to use on the next start. The first run writes the archive at its end (a few
  seconds more, once); it is checked before it is used (a damaged archive crashes the
  JVM), and named after everything it depends on (the JVM, Spark's jars, the driver's
  Java options), so a change to any of them writes a new one.

Both live in a cache folder (``MYSQLCDC_CACHE_DIR``, else ``$XDG_CACHE_HOME/mysqlcdc``,
else ``~/.cache/mysqlcdc``). ``MYSQLCDC_WARM_START=0`` turns both off. Nothing here may
fail a run: a cache that cannot be written just means a slower start.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["cache_dir", "spark_home", "java_options", "after_start", "adopt", "enabled"]

log = logging.getLogger(__name__)

ENV_CACHE = "MYSQLCDC_CACHE_DIR"
ENV_SWITCH = "MYSQLCDC_WARM_START"
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
# the JVM's notes about its archive (one it cannot use, one it writes) stay off stdout
_QUIET = "-Xlog:cds*=off"
# jars a pipeline's driver goes without (names' beginnings): the ML library, whose session
# extension costs every session's start a third of a CPU second (the module's note)
LEFT_OUT = ("spark-mllib_",)
# after its JVM ended, an archive's check takes seconds (the checker touches the job
# file when it starts): one not done after _CHECKING_S is stuck, after _ABANDONED_S debris
_CHECKING_S = 600.0
_ABANDONED_S = 3600.0
# an archive no run used for this long is removed: each change of the JVM, of pyspark or of
# the driver's Java options makes a new one (about 160 MB)
_UNUSED_S = 14 * 24 * 3600.0


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> Path | None:
    """The folder for the archive and the SPARK_HOME links, created; None when it cannot be."""
    if os.environ.get(ENV_CACHE):
        base = Path(os.environ[ENV_CACHE])
    elif os.environ.get("XDG_CACHE_HOME"):
        base = Path(os.environ["XDG_CACHE_HOME"]) / "mysqlcdc"
    else:
        base = Path.home() / ".cache" / "mysqlcdc"
    try:
        base.mkdir(parents=True, exist_ok=True)
        probe = base / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError:
        return None
    return base


def _package() -> Path | None:
    """The pip-installed pyspark package when it carries Spark (jars and the zip)."""
    try:
        import pyspark
    except ImportError:   # pragma: no cover - mysqlcdc depends on it
        return None
    pkg = Path(pyspark.__file__).resolve().parent
    if (pkg / "jars").is_dir() and (pkg / "python" / "lib" / "pyspark.zip").is_file():
        return pkg
    return None


def _digest(*parts: object) -> str:
    return hashlib.sha256("\x00".join(map(str, parts)).encode()).hexdigest()[:16]


def spark_home(cache: Path) -> Path | None:
    """A SPARK_HOME of links to the pyspark package's folders, all but ``python/``, and
    to its jars, all but the ML library's (``LEFT_OUT``).

    Only for the pip package and only when the user set no SPARK_HOME of their own (or
    set it to that package). Returns the folder, or None when it does not apply.
    """
    pkg = _package()
    if pkg is None:
        return None
    current = os.environ.get("SPARK_HOME")
    if current and Path(current).resolve() != pkg:
        return None
    # the workers then import pyspark from their interpreter: only when it is this one
    worker = os.environ.get("PYSPARK_PYTHON") or sys.executable
    if os.path.abspath(shutil.which(worker) or worker) != os.path.abspath(sys.executable):
        return None
    import pyspark

    home = cache / f"spark-home-{_digest(pkg, pyspark.__version__, *LEFT_OUT)}"
    if (home / "jars").is_dir() and (home / "bin").is_dir():
        return home
    tmp = cache / f".{home.name}.{os.getpid()}"
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for entry in pkg.iterdir():
            if entry.name == "jars":
                (tmp / "jars").mkdir()
                for jar in entry.iterdir():
                    if not jar.name.startswith(LEFT_OUT):
                        (tmp / "jars" / jar.name).symlink_to(jar)
            elif entry.name not in ("python", "__pycache__"):
                (tmp / entry.name).symlink_to(entry)
        try:
            tmp.rename(home)
        except OSError:   # another process made it first
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    return home if (home / "jars").is_dir() else None


def _java() -> Path | None:
    java_home = os.environ.get("JAVA_HOME")
    found = Path(java_home) / "bin" / "java" if java_home else None
    if found is None or not found.exists():
        which = shutil.which("java")
        found = Path(which) if which else None
    return found.resolve() if found is not None else None


def _archive_key(home: str | Path, options: str) -> str | None:
    java = _java()
    jars = Path(home) / "jars"
    if java is None or not jars.is_dir():
        return None
    stat = java.stat()
    names = sorted(p.name for p in jars.iterdir())
    return _digest(java, stat.st_size, stat.st_mtime_ns, Path(home).resolve(), *names,
                   options)


def _alive(pid: int) -> bool:
    """A running process (an exited one its parent has not yet reaped is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


@dataclass(frozen=True)
class _Pending:
    """An archive the JVM of this process writes at its exit."""

    path: Path
    final: Path
    size_file: Path


_pending: _Pending | None = None


def java_options(cache: Path, home: str | None, user_options: str) -> str:
    """The driver's Java options with the class-data archive's: use it when there is a
    sound one, else have the JVM write one at its exit (``after_start`` arranges the
    rest). ``user_options`` (the user's own ``spark.driver.extraJavaOptions``) are kept,
    and named in the archive's key."""
    global _pending
    spark = home or os.environ.get("SPARK_HOME") or _package()
    if spark is None or "SharedArchiveFile" in user_options or "ArchiveClassesAtExit" in \
            user_options or any(c.isspace() for c in str(cache)):
        return user_options       # the user's own archive; or a path Spark would split
    key = _archive_key(spark, user_options)
    if key is None:
        return user_options
    final = cache / f"jvm-{key}.jsa"
    size_file = cache / f"jvm-{key}.size"
    extra = ""
    if final.is_file() and size_file.is_file():
        try:
            sound = int(size_file.read_text().strip()) == final.stat().st_size
        except (OSError, ValueError):
            sound = False
        if sound:
            extra = f"-XX:SharedArchiveFile={final} {_QUIET}"
            _used(size_file)
            _prune(cache, key)
        else:                 # changed since it was checked: never hand it to a JVM
            for p in (final, size_file):
                p.unlink(missing_ok=True)
    if not extra:
        if _someone_writes(cache, key):
            return user_options
        path = cache / f"jvm-{key}.{os.getpid()}.pending"
        _pending = _Pending(path, final, size_file)
        extra = f"-XX:ArchiveClassesAtExit={path} {_QUIET}"
    return f"{user_options} {extra}".strip()


def _used(path: Path) -> None:
    """Mark a cache entry as used now (its modification time; never the archive's own)."""
    try:
        os.utime(path)
    except OSError:
        pass


def _prune(cache: Path, key: str) -> None:
    """Remove the archives no run used for ``_UNUSED_S`` (of other JVMs, pyspark versions,
    Java options), never the one this run uses. An archive goes with the size note that
    vouches for it, the note first: a JVM about to map it then starts without one, and a
    JVM that mapped it keeps its mapping. (The SPARK_HOMEs of links stay: they are a few
    kilobytes, and a JVM running for weeks still opens jars through one.)"""
    old = time.time() - _UNUSED_S
    for size_file in cache.glob("jvm-*.size"):
        try:
            if size_file.stem == f"jvm-{key}" or size_file.stat().st_mtime > old:
                continue
            size_file.unlink()
            size_file.with_suffix(".jsa").unlink(missing_ok=True)
        except OSError:
            continue


def _someone_writes(cache: Path, key: str) -> bool:
    """Whether another run's JVM will write this archive; clears what dead runs left."""
    now = time.time()
    for job_file in cache.glob(f"jvm-{key}.*.pending.json"):
        try:
            pid = int(json.loads(job_file.read_text())["pid"])
            age = now - job_file.stat().st_mtime
        except (OSError, ValueError, KeyError):
            continue
        if _alive(pid) or age < _CHECKING_S:
            return True      # its JVM writes the archive when it ends, or it is checked now
        if age > _ABANDONED_S:           # its checker died too
            Path(str(job_file)[: -len(".json")]).unlink(missing_ok=True)
            job_file.unlink(missing_ok=True)
    for archive in cache.glob(f"jvm-{key}.*.pending"):
        try:
            pid = int(archive.name.split(".")[1])
        except ValueError:
            continue
        if not archive.with_name(archive.name + ".json").exists() and not _alive(pid):
            archive.unlink(missing_ok=True)  # its run ended before handing it on
    return False


def after_start(spark) -> None:
    """Once the JVM runs: when it was asked to write an archive, start a detached process
    that waits for the JVM to end (it writes the archive then), checks the archive and
    only then gives it its final name. Nobody waits for it."""
    global _pending
    pending, _pending = _pending, None
    if pending is None:
        return
    try:
        jvm = spark.sparkContext._jvm
        args = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
                    .getInputArguments())
        if f"-XX:ArchiveClassesAtExit={pending.path}" not in args:
            return              # a JVM that was running already: it writes nothing
        job = {"pending": str(pending.path), "final": str(pending.final),
               "size_file": str(pending.size_file),
               "pid": int(jvm.java.lang.ProcessHandle.current().pid()),
               "java": str(Path(str(jvm.System.getProperty("java.home"))) / "bin" / "java"),
               "class_path": str(jvm.System.getProperty("java.class.path")),
               # checked with the options (heap, modules) of the JVM that wrote it
               "options": [a for a in args if not a.startswith(
                   ("-XX:ArchiveClassesAtExit", "-XX:SharedArchiveFile", "-Xlog"))]}
        job_file = pending.path.with_name(pending.path.name + ".json")
        job_file.write_text(json.dumps(job))
        subprocess.Popen([sys.executable, "-m", "mysqlcdc.spark.warmstart", str(job_file)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True,
                         cwd=str(pending.path.parent))
    except Exception:   # noqa: BLE001 - a speed-up only
        log.debug("no class-data archive this time", exc_info=True)


def adopt(job_file: Path, wait_s: float = 24 * 3600.0) -> bool:
    """Wait for the JVM that writes an archive to end, check the archive with a JVM that
    must map and checksum all of it, and only then give it its final name. True when the
    archive is in place."""
    job = json.loads(job_file.read_text())
    pending, final, size_file = Path(job["pending"]), Path(job["final"]), Path(job["size_file"])
    try:
        deadline = time.monotonic() + wait_s
        while _alive(job["pid"]):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)
        if not pending.is_file():
            return False
        os.utime(job_file)              # checking from now (see _someone_writes)
        check = subprocess.run(
            [job["java"], "-Xshare:on", f"-XX:SharedArchiveFile={pending}",
             "-XX:+VerifySharedSpaces", "-XX:ErrorFile=/dev/null", *job["options"],
             "-cp", job["class_path"], "-version"],
            cwd=str(pending.parent), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            timeout=300)
        if check.returncode != 0:
            return False
        size = pending.stat().st_size
        os.replace(pending, final)
        note = size_file.with_name(f"{size_file.name}.{os.getpid()}")
        note.write_text(str(size))
        os.replace(note, size_file)     # the size last: it vouches for the archive
        return True
    finally:
        pending.unlink(missing_ok=True)
        job_file.unlink(missing_ok=True)


if __name__ == "__main__":
    try:
        adopt(Path(sys.argv[1]))
    except Exception:   # noqa: BLE001 - detached: nobody to tell
        sys.exit(1)
