"""The driver JVM's logging configuration: the project's, unless the user has one."""

from __future__ import annotations

from pathlib import Path

from mysqlcdc.spark import session
from mysqlcdc.spark.session import quiet_start

OPTION = "spark.driver.extraJavaOptions"


def _clean(monkeypatch):
    monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
    monkeypatch.delenv("SPARK_HOME", raising=False)


def test_the_driver_logs_as_the_packaged_configuration_says(monkeypatch):
    _clean(monkeypatch)
    out = quiet_start({OPTION: "-Xss4m", "spark.ui.enabled": "false"})
    words = out[OPTION].split()
    assert words[0] == "-Xss4m" and out["spark.ui.enabled"] == "false"
    flag = [w for w in words if w.startswith("-Dlog4j2.configurationFile=file:")]
    assert len(flag) == 1
    path = Path(flag[0].split("=file:", 1)[1])
    text = path.read_text()
    assert path.name == "log4j2.properties" and path.parent == Path(session.__file__).parent
    # the shell's level equals the root's (no "Setting default log level"), and Hadoop's
    # missing native library is no warning
    assert "rootLogger.level = warn" in text and "logger.repl.level = warn" in text
    assert "org.apache.hadoop.util.NativeCodeLoader" in text


def test_no_options_of_its_own_are_needed(monkeypatch):
    _clean(monkeypatch)
    assert quiet_start({})[OPTION].startswith("-Dlog4j2.configurationFile=file:/")


def test_a_logging_configuration_of_the_users_options_wins(monkeypatch):
    _clean(monkeypatch)
    for own in ("-Dlog4j2.configurationFile=/etc/mine.properties",
                "-Dlog4j.configuration=file:/etc/old.properties"):
        assert quiet_start({OPTION: own}) == {OPTION: own}


def test_a_logging_configuration_in_the_users_spark_folders_wins(monkeypatch, tmp_path):
    _clean(monkeypatch)
    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    (conf / "log4j2.properties.template").write_text("rootLogger.level = info\n")
    assert OPTION in quiet_start({})                # a template is no configuration: ours
    (conf / "log4j2.properties").write_text("rootLogger.level = info\n")
    assert quiet_start({}) == {}
    monkeypatch.delenv("SPARK_CONF_DIR")
    home = tmp_path / "spark"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "log4j2.xml").write_text("<Configuration/>\n")
    monkeypatch.setenv("SPARK_HOME", str(home))
    assert quiet_start({}) == {}
