"""The start-up cache: the SPARK_HOME without pyspark's zip, and the JVM's class archive,
never handed to a JVM unless it was checked whole."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mysqlcdc.spark import warmstart

pytestmark = pytest.mark.unit


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv(warmstart.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.setattr(warmstart, "_pending", None)
    return tmp_path / "cache"


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_the_cache_folder_follows_the_environment(env, monkeypatch, tmp_path):
    assert warmstart.cache_dir() == env and env.is_dir()
    monkeypatch.delenv(warmstart.ENV_CACHE)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert warmstart.cache_dir() == tmp_path / "xdg" / "mysqlcdc"
    monkeypatch.setenv(warmstart.ENV_SWITCH, "0")
    assert not warmstart.enabled()


def test_spark_home_links_everything_but_the_python_zip_and_the_ml_library(env):
    import pyspark

    pkg = Path(pyspark.__file__).resolve().parent
    home = warmstart.spark_home(warmstart.cache_dir())
    assert home is not None and home.parent == env
    assert not (home / "python").exists()
    assert (home / "bin" / "spark-submit").exists()
    jars = {p.name: p.resolve() for p in (home / "jars").iterdir()}
    ml = {p.name for p in (pkg / "jars").glob("spark-mllib_*.jar")}
    assert ml, "the package no longer carries the ML library this test expects"
    assert jars == {p.name: p for p in (pkg / "jars").iterdir() if p.name not in ml}
    assert warmstart.spark_home(env) == home          # made once, then found


def test_spark_home_leaves_a_users_own_spark_and_another_interpreter_alone(env, monkeypatch,
                                                                          tmp_path):
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark-4"))
    assert warmstart.spark_home(warmstart.cache_dir()) is None
    monkeypatch.delenv("SPARK_HOME")
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3")   # its workers may lack pyspark
    assert warmstart.spark_home(warmstart.cache_dir()) is None


def test_without_an_archive_the_jvm_is_asked_to_write_one(env):
    cache = warmstart.cache_dir()
    options = warmstart.java_options(cache, None, "-Dmine=1")
    assert options.startswith("-Dmine=1 ")
    assert f"-XX:ArchiveClassesAtExit={cache}/jvm-" in options and ".pending" in options
    assert "-Xlog:cds*=off" in options


def test_a_sound_archive_is_used_and_a_changed_one_is_thrown_away(env):
    cache = warmstart.cache_dir()
    warmstart.java_options(cache, None, "")
    pending = warmstart._pending
    pending.final.write_bytes(b"x" * 100)
    pending.size_file.write_text("100")
    options = warmstart.java_options(cache, None, "")
    assert options == f"-XX:SharedArchiveFile={pending.final} -Xlog:cds*=off"
    pending.final.write_bytes(b"x" * 50)                # cut short since it was checked
    options = warmstart.java_options(cache, None, "")
    assert "SharedArchiveFile" not in options and "ArchiveClassesAtExit" in options
    assert not pending.final.exists() and not pending.size_file.exists()


def test_archives_no_run_used_for_two_weeks_are_removed(env):
    """Every new JVM, pyspark or set of driver Java options writes another archive of
    about 160 MB: the ones no run used for two weeks go when a run uses its own, and the
    one a run uses is marked used."""
    cache = warmstart.cache_dir()
    warmstart.java_options(cache, None, "")
    pending = warmstart._pending
    pending.final.write_bytes(b"x" * 100)
    pending.size_file.write_text("100")
    month = time.time() - 30 * 24 * 3600
    stale, recent = cache / "jvm-0000000000000000", cache / "jvm-1111111111111111"
    for base in (stale, recent):
        base.with_suffix(".jsa").write_bytes(b"y" * 10)
        base.with_suffix(".size").write_text("10")
    os.utime(stale.with_suffix(".size"), (month, month))
    os.utime(stale.with_suffix(".jsa"), (month, month))
    os.utime(recent.with_suffix(".jsa"), (month, month))     # the note says when it was used
    os.utime(pending.size_file, (month, month))             # this run's own: kept, marked
    options = warmstart.java_options(cache, None, "")
    assert options == f"-XX:SharedArchiveFile={pending.final} -Xlog:cds*=off"
    assert not stale.with_suffix(".jsa").exists() and not stale.with_suffix(".size").exists()
    assert recent.with_suffix(".jsa").exists() and recent.with_suffix(".size").exists()
    assert pending.final.exists() and pending.size_file.stat().st_mtime > time.time() - 60


def test_the_archives_name_changes_with_the_drivers_java_options(env):
    cache = warmstart.cache_dir()
    a = warmstart.java_options(cache, None, "")
    b = warmstart.java_options(cache, None, "-XX:+UseSerialGC")
    assert a.split("jvm-")[1][:16] != b.split("jvm-")[1][:16]


def test_one_writer_at_a_time_and_debris_is_cleared(env):
    cache = warmstart.cache_dir()
    options = warmstart.java_options(cache, None, "")
    pending = warmstart._pending
    key = pending.final.name[len("jvm-"):-len(".jsa")]
    job = pending.path.with_name(pending.path.name + ".json")
    job.write_text(json.dumps({"pid": os.getpid()}))     # a live JVM will write it
    assert warmstart.java_options(cache, None, "") == ""
    job.unlink()
    orphan = cache / f"jvm-{key}.{_dead_pid()}.pending"  # its run died before handing it on
    orphan.write_bytes(b"half")
    assert "ArchiveClassesAtExit" in warmstart.java_options(cache, None, "")
    assert not orphan.exists()
    assert options  # the first call asked for an archive too


def test_a_users_own_archive_options_are_kept_as_they_are(env):
    cache = warmstart.cache_dir()
    assert warmstart.java_options(cache, None, "-XX:SharedArchiveFile=/x.jsa") == \
        "-XX:SharedArchiveFile=/x.jsa"


def _job(tmp_path: Path, pending: Path) -> Path:
    job = pending.with_name(pending.name + ".json")
    job.write_text(json.dumps({
        "pending": str(pending), "final": str(tmp_path / "jvm-k.jsa"),
        "size_file": str(tmp_path / "jvm-k.size"), "pid": _dead_pid(),
        "java": shutil.which("java"), "class_path": "", "options": []}))
    return job


def test_an_archive_is_put_in_place_only_after_a_jvm_mapped_all_of_it(tmp_path):
    pending = tmp_path / "jvm-k.1.pending"
    subprocess.run(["java", f"-XX:ArchiveClassesAtExit={pending}", "-Xlog:cds*=off",
                    "-version"], check=True, capture_output=True)
    whole = pending.read_bytes()
    assert warmstart.adopt(_job(tmp_path, pending))
    final = tmp_path / "jvm-k.jsa"
    assert final.read_bytes() == whole
    assert int((tmp_path / "jvm-k.size").read_text()) == len(whole)
    assert not pending.exists() and not list(tmp_path.glob("*.json"))

    final.unlink()
    (tmp_path / "jvm-k.size").unlink()
    pending.write_bytes(whole[: len(whole) // 2])       # what a killed JVM leaves
    assert not warmstart.adopt(_job(tmp_path, pending))
    assert not final.exists() and not pending.exists()
    assert not list(tmp_path.glob("hs_err*"))
