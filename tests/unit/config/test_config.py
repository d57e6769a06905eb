"""Pipeline config: loading, defaults, errors with lines, secrecy, path resolution."""

from __future__ import annotations

import pickle
import textwrap
from pathlib import Path

import pytest
from pydantic import BaseModel

from mysqlcdc.config import (
    ChangelogSinkConfig,
    ConsoleSinkConfig,
    PipelineConfig,
    Secret,
    TableFilter,
    load_pipeline,
    load_pipeline_from_dict,
)
from mysqlcdc.config.models import _Model, models_in
from mysqlcdc.errors import ConfigError
from mysqlcdc.types import BinlogPosition

pytestmark = pytest.mark.unit

PASSWORD = "hunter2-Zq9!"
ENV = {"MYSQLCDC_PASSWORD": PASSWORD}

FULL = """\
name: shop-cdc
source:
  host: 127.0.0.1
  port: 3306
  user: cdc
  password_env: MYSQLCDC_PASSWORD
  server_id: 5401
  ssl: {ca: certs/ca.pem, verify_identity: false}
  start: mariadb-bin.000003:4
  tables:
    include: ["shop.*"]
    exclude: ["shop.tmp_*"]
  max_events_per_batch: 10000
  parallelism: 2
  connect_timeout_s: 10
  reconnect: {attempts: 3, initial_delay_s: 0.5, max_delay_s: 30}
spark:
  master: "local[*]"
  app_name: null
  trigger_interval: "1 second"
  checkpoint: ./state/checkpoint
  conf: {spark.sql.shuffle.partitions: 4, spark.ui.enabled: false}
sinks:
  - changelog:
      path: ./changelog
      partition_by: [db, table]
  - console:
      max_rows: 20
      truncate: true
"""

MINIMAL = """\
name: shop-cdc
source:
  host: db.internal
  user: cdc
  server_id: 5401
spark:
  checkpoint: ck
sinks:
  - console:
"""


def write(folder: Path, text: str, name: str = "pipeline.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def line_of(text: str, fragment: str) -> int:
    """1-based line of the first line of ``text`` containing ``fragment``."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if fragment in line)


def load_error(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> ConfigError:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_pipeline(path, env=ENV if env is None else env)
    return info.value


# --- valid files -----------------------------------------------------------


def test_full_file_loads(tmp_path: Path) -> None:
    cfg = load_pipeline(write(tmp_path, FULL), env=ENV)
    src = cfg.source
    assert (src.host, src.port, src.user, src.server_id) == ("127.0.0.1", 3306, "cdc", 5401)
    assert src.password() == PASSWORD
    assert src.start == BinlogPosition.parse("mariadb-bin.000003:4")
    assert src.ssl is not None and src.ssl.verify_cert and not src.ssl.verify_identity
    assert src.server_ids() == range(5401, 5404)
    # Two sinks: two queries, each its own replica with its own block of ids.
    assert src.server_ids(len(cfg.sinks)) == range(5401, 5407)
    assert [src.sink_server_id(i) for i in range(2)] == [5401, 5404]
    assert cfg.spark.app_name == "mysqlcdc-shop-cdc"
    assert cfg.spark.conf == {"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false"}
    changelog, console = cfg.sinks
    assert isinstance(changelog, ChangelogSinkConfig) and changelog.partition_by == ["db", "table"]
    assert isinstance(console, ConsoleSinkConfig) and console.max_rows == 20


def test_minimal_file_gets_defaults(tmp_path: Path) -> None:
    cfg = load_pipeline(write(tmp_path, MINIMAL), env={})
    src = cfg.source
    assert (src.port, src.start, src.password(), src.ssl) == (3306, "latest", "", None)
    assert (src.tables.include, src.tables.exclude) == (["*.*"], [])
    assert (src.max_events_per_batch, src.parallelism, src.connect_timeout_s) == (None, 1, 10.0)
    assert (src.events_per_batch(True), src.events_per_batch(False)) == (500_000, 50_000)
    reconnect = src.reconnect
    assert (reconnect.attempts, reconnect.initial_delay_s, reconnect.max_delay_s) == (None, 0.5, 30)
    assert reconnect.max_wait_s == 600
    assert (cfg.spark.master, cfg.spark.trigger_interval) == ("local[*]", "1 second")
    assert cfg.spark.app_name == "mysqlcdc-shop-cdc" and cfg.spark.conf == {}
    assert cfg.sinks == [ConsoleSinkConfig()]


@pytest.mark.parametrize("text", [FULL, MINIMAL])
def test_dump_round_trips(tmp_path: Path, text: str) -> None:
    cfg = load_pipeline(write(tmp_path, text), env=ENV)
    dumped = cfg.model_dump(mode="json")
    assert dumped["sinks"][0].keys() <= {"changelog", "console"}
    assert load_pipeline_from_dict(dumped, base_dir="/elsewhere", env=ENV) == cfg


def test_start_keywords(tmp_path: Path) -> None:
    for start in ("earliest", "latest"):
        text = MINIMAL.replace("  server_id: 5401\n", f"  server_id: 5401\n  start: {start}\n")
        assert load_pipeline(write(tmp_path, text), env={}).source.start == start


# --- mistakes: one ConfigError naming the field and the line ---------------

MISTAKES = {
    "typo key": (FULL.replace("source:", "soruce:"), "soruce", "soruce:", "did you mean 'source'"),
    "unknown sink type": (
        FULL.replace("  - console:", "  - kafak:"),
        "sinks.1",
        "- kafak:",
        "unknown sink type 'kafak'",
    ),
    "bad port type": (
        FULL.replace("port: 3306", "port: abc"),
        "source.port",
        "port: abc",
        "Input should be a valid integer",
    ),
    "port out of range": (
        FULL.replace("port: 3306", "port: 70000"),
        "source.port",
        "port: 70000",
        "less than or equal to 65535",
    ),
    "missing required field": (
        FULL.replace("  host: 127.0.0.1\n", ""),
        "source.host",
        "source:",
        "required option is missing",
    ),
    "missing sink option": (
        FULL.replace("      path: ./changelog\n", ""),
        "sinks.0.changelog.path",
        "- changelog:",
        "required option is missing",
    ),
    "typo in sink option": (
        FULL.replace("max_rows: 20", "max_row: 20"),
        "sinks.1.console.max_row",
        "max_row:",
        "did you mean 'max_rows'",
    ),
    "bad start": (
        FULL.replace("start: mariadb-bin.000003:4", "start: yesterday"),
        "source.start",
        "start: yesterday",
        "expected earliest, latest, FILE:POS",
    ),
    "bad pattern": (
        FULL.replace('exclude: ["shop.tmp_*"]', 'exclude: ["shop.tmp_*", "tmp"]'),
        "source.tables.exclude.1",
        "exclude:",
        "db.table glob",
    ),
    "server_id zero": (
        FULL.replace("server_id: 5401", "server_id: 0"),
        "source.server_id",
        "server_id: 0",
        "greater than or equal to 1",
    ),
    "bad name": (FULL.replace("name: shop-cdc", "name: Shop CDC"), "name", "name:", "pattern"),
    "bad trigger": (
        FULL.replace('"1 second"', '"soon"'),
        "spark.trigger_interval",
        "trigger_interval",
        "'1 second'",
    ),
    "standalone master without a port": (
        FULL.replace('master: "local[*]"', 'master: "spark://spark-master"'),
        "spark.master",
        "master:",
        "host:port",
    ),
    "no sinks": (
        FULL[: FULL.index("sinks:")] + "sinks: []\n",
        "sinks",
        "sinks:",
        "at least 1 item",
    ),
    "sink not a one-key mapping": (
        FULL.replace(
            "  - console:\n      max_rows: 20\n      truncate: true\n",
            "  - console: {}\n    changelog: {path: x}\n",
        ),
        "sinks.1",
        "- console:",
        "one-key mapping",
    ),
}


@pytest.mark.parametrize("case", MISTAKES, ids=list(MISTAKES))
def test_mistake_names_field_and_line(tmp_path: Path, case: str) -> None:
    text, field, marker, fragment = MISTAKES[case]
    err = load_error(tmp_path, text)
    expected = f"{tmp_path / 'pipeline.yaml'}:{line_of(text, marker)}: {field}: "
    assert expected in str(err), str(err)
    assert fragment in str(err)
    assert len(err.problems) == 1, str(err)  # type: ignore[attr-defined]
    assert err.problems[0].path == field  # type: ignore[attr-defined]


def test_bad_port_shows_the_value(tmp_path: Path) -> None:
    err = load_error(tmp_path, FULL.replace("port: 3306", "port: abc"))
    assert "source.port: Input should be a valid integer" in str(err)
    assert "(got 'abc')" in str(err)


def test_missing_env_var_names_variable_and_field(tmp_path: Path) -> None:
    err = load_error(tmp_path, FULL, env={})
    line = line_of(FULL, "password_env")
    assert f"pipeline.yaml:{line}: source.password_env:" in str(err)
    assert "MYSQLCDC_PASSWORD is not set" in str(err)


def test_yaml_syntax_error_has_line(tmp_path: Path) -> None:
    text = FULL.replace("  user: cdc", "  user: [cdc")
    err = load_error(tmp_path, text)
    assert "YAML syntax error" in str(err)
    assert f"pipeline.yaml:{line_of(text, 'user: [cdc') + 1}:" in str(err)


def test_duplicate_key_is_an_error(tmp_path: Path) -> None:
    text = FULL.replace("  port: 3306\n", "  port: 3306\n  port: 3307\n")
    err = load_error(tmp_path, text)
    assert f"pipeline.yaml:{line_of(text, 'port: 3307')}: source.port: duplicate key" in str(err)


def test_every_problem_in_one_error(tmp_path: Path) -> None:
    text = FULL.replace("port: 3306", "port: abc").replace("source:", "soruce:\nsource:", 1)
    text = text.replace("max_rows: 20", "max_rows: -1")
    err = load_error(tmp_path, text)
    paths = [p.path for p in err.problems]  # type: ignore[attr-defined]
    assert paths == ["soruce", "source.port", "sinks.1.console.max_rows"]
    assert str(err).count("pipeline.yaml:") >= 3


def test_empty_and_missing_files(tmp_path: Path) -> None:
    assert "empty" in str(load_error(tmp_path, "# nothing\n"))
    with pytest.raises(ConfigError, match="cannot read"):
        load_pipeline(tmp_path / "absent.yaml")
    assert "(top level)" in str(load_error(tmp_path, "- a list\n"))


def test_dict_errors_have_no_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_pipeline_from_dict({"name": "x"}, base_dir=tmp_path, env={})
    assert "\n  source: required option is missing" in str(info.value)


# --- the password never shows ----------------------------------------------


def test_password_never_shown(tmp_path: Path) -> None:
    cfg = load_pipeline(write(tmp_path, FULL), env=ENV)
    for text in (repr(cfg), str(cfg), repr(cfg.source), str(cfg.source), cfg.model_dump_json()):
        assert PASSWORD not in text
    assert PASSWORD not in str(cfg.model_dump())
    assert PASSWORD not in str(cfg.source.model_dump(mode="json"))
    assert pickle.loads(pickle.dumps(cfg)).source.password() == PASSWORD


def test_password_not_in_errors(tmp_path: Path) -> None:
    text = FULL.replace("port: 3306", "port: abc")
    assert PASSWORD not in str(load_error(tmp_path, text))
    text = FULL.replace("  user: cdc\n", f"  user: cdc\n  password: {PASSWORD}\n")
    err = load_error(tmp_path, text)
    assert "source.password: unknown option" in str(err) and PASSWORD not in str(err)
    assert PASSWORD not in repr(err.problems)  # type: ignore[attr-defined]


def test_secret_masks_itself() -> None:
    s = Secret(PASSWORD)
    assert (repr(s), str(s), f"{s}", f"{s:>20}") == ("Secret('***')", "***", "***", "***")
    assert s.reveal() == PASSWORD and s == Secret(PASSWORD)

    class HasSecret(BaseModel):
        token: Secret

    model = HasSecret(token=PASSWORD)
    assert model.token.reveal() == PASSWORD
    assert model.model_dump_json() == '{"token":"***"}'


# --- paths -----------------------------------------------------------------


def test_relative_paths_resolve_against_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "conf" / "shop"
    monkeypatch.chdir(tmp_path)
    cfg = load_pipeline(write(folder, FULL), env=ENV)
    assert cfg.spark.checkpoint == str(folder / "state" / "checkpoint")
    assert cfg.sinks[0].path == str(folder / "changelog")  # type: ignore[union-attr]
    assert cfg.source.ssl is not None and cfg.source.ssl.ca == folder / "certs" / "ca.pem"


def test_absolute_paths_and_uris_kept(tmp_path: Path) -> None:
    text = FULL.replace("./state/checkpoint", "s3a://bucket/ck").replace(
        "./changelog", str(tmp_path / "out" / ".." / "cl")
    )
    cfg = load_pipeline(write(tmp_path / "x", text), env=ENV)
    assert cfg.spark.checkpoint == "s3a://bucket/ck"
    assert cfg.sinks[0].path == str(tmp_path / "cl")  # type: ignore[union-attr]


def test_dict_paths_resolve_against_base_dir(tmp_path: Path) -> None:
    data = {
        "name": "n",
        "source": {"host": "h", "user": "u", "server_id": 1},
        "spark": {"checkpoint": "ck"},
        "sinks": [{"changelog": {"path": "../cl"}}],
    }
    cfg = load_pipeline_from_dict(data, base_dir=tmp_path / "a", env={})
    assert cfg.spark.checkpoint == str(tmp_path / "a" / "ck")
    assert cfg.sinks[0].path == str(tmp_path / "cl")  # type: ignore[union-attr]


# --- tables ----------------------------------------------------------------


def test_matcher_include_minus_exclude(tmp_path: Path) -> None:
    match = load_pipeline(write(tmp_path, FULL), env=ENV).source.tables.matcher()
    assert match("shop", "orders")
    assert not match("shop", "tmp_orders")
    assert not match("Shop", "orders")  # case-sensitive
    assert not match("other", "orders")


def test_matcher_globs_stay_within_a_name() -> None:
    match = TableFilter(("s*.order?", "*.[ab]x"), ("*.[!a]x",))
    assert match("shop", "order1") and match("s", "orders")
    assert not match("shop", "order12")
    assert match("db", "ax") and not match("db", "bx")
    assert pickle.loads(pickle.dumps(match))("shop", "order1")


# --- other rules -----------------------------------------------------------


def test_server_id_range_must_fit(tmp_path: Path) -> None:
    text = FULL.replace("server_id: 5401", f"server_id: {2**32 - 2}")
    err = load_error(tmp_path, text)
    assert "source: server_id + parallelism" in str(err)


def test_snapshot_mode_follows_start_unless_set(tmp_path: Path) -> None:
    cfg = load_pipeline(write(tmp_path, MINIMAL), env=ENV)
    assert cfg.source.start == "latest" and cfg.source.snapshot_mode() == "initial"
    cfg = load_pipeline(write(tmp_path, FULL), env=ENV)        # start: FILE:POS
    assert cfg.source.snapshot_mode() == "never"
    text = FULL.replace("server_id: 5401", "server_id: 5401\n  snapshot: {mode: initial}")
    err = load_error(tmp_path, text)
    assert "snapshot.mode initial reads the tables as they are now" in str(err)


def test_snapshot_options_are_checked(tmp_path: Path) -> None:
    text = FULL.replace("server_id: 5401", "server_id: 5401\n  snapshot: {mode: when_needed}")
    assert "snapshot.mode when_needed reads the tables" in str(load_error(tmp_path, text))
    ok = MINIMAL.replace("server_id: 5401", "server_id: 5401\n  snapshot: {mode: when_needed, "
                         "chunk_keys: {shop.log: [day, n]}, query_timeout_s: 30, "
                         "chunks_per_batch: 8, signal_table: ops.signals}")
    snap = load_pipeline(write(tmp_path, ok), env=ENV).source.snapshot
    assert (snap.mode, snap.chunk_keys, snap.signal_table) == ("when_needed", {"shop.log": ["day", "n"]},
                                                               "ops.signals")
    assert load_pipeline(write(tmp_path, MINIMAL), env=ENV).source.snapshot.signal_table == \
        "mysqlcdc.mysqlcdc_signal"
    for bad, said in (("chunk_keys: {shop.*: [a]}", "chunk_keys names exact tables"),
                      ("chunk_keys: {shop.log: []}", "names no column"),
                      ("signal_table: nodot", "signal_table must be db.table"),
                      ("chunk_rows: 2000000", "chunk_rows")):
        text = MINIMAL.replace("server_id: 5401", f"server_id: 5401\n  snapshot: {{{bad}}}")
        assert said in str(load_error(tmp_path, text)), bad


def test_a_pipeline_that_may_decode_ahead_also_takes_a_second_block_of_ids(tmp_path: Path
                                                                          ) -> None:
    # one sink, parallelism 1, a local master (the default local[*]): its decode-ahead and
    # slice helper read as the ids a second sink would take (DESIGN.md decision 24)
    cfg = load_pipeline(write(tmp_path, MINIMAL), env=ENV)
    assert cfg.replica_ids() == range(5401, 5405)
    parallel = MINIMAL.replace("server_id: 5401", "server_id: 5401\n  parallelism: 2")
    assert load_pipeline(write(tmp_path, parallel), env=ENV).replica_ids() == range(5401, 5404)
    remote = MINIMAL.replace("checkpoint: ck", "checkpoint: ck\n  master: spark://h:7077")
    assert load_pipeline(write(tmp_path, remote), env=ENV).replica_ids() == range(5401, 5403)
    two = load_pipeline(write(tmp_path, FULL), env=ENV)
    assert two.replica_ids() == two.source.server_ids(len(two.sinks))


def test_every_sinks_server_ids_must_fit(tmp_path: Path) -> None:
    # parallelism 2, two sinks: ids server_id .. server_id+5.
    text = FULL.replace("server_id: 5401", f"server_id: {2**32 - 5}")
    err = load_error(tmp_path, text)
    assert "sinks*(parallelism+1)" in str(err)


def test_ssl_cert_needs_key(tmp_path: Path) -> None:
    text = FULL.replace("{ca: certs/ca.pem, verify_identity: false}", "{cert: c.pem}")
    assert "source.ssl: cert and key must be given together" in str(load_error(tmp_path, text))


def test_reconnect_delays_ordered(tmp_path: Path) -> None:
    text = FULL.replace("max_delay_s: 30", "max_delay_s: 0.1")
    assert "source.reconnect: max_delay_s must be at least" in str(load_error(tmp_path, text))


def _models(root: type[BaseModel]) -> set[type[BaseModel]]:
    found = {root}
    for field in root.model_fields.values():
        for model in models_in(field.annotation):
            found |= _models(model)
    return found


def test_every_option_is_documented_and_strict() -> None:
    models = _models(PipelineConfig)
    assert len(models) == 28   # + Kafka, Mirror, ChangelogTable sinks, SnapshotConfig, HeartbeatConfig;
                               # + 11 transforms, joins, dead letters (+ kafka), plugins sink
    for model in models:
        assert issubclass(model, _Model) and model.model_config["extra"] == "forbid"
        assert model.__doc__ and model.__doc__.strip(), model
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"


def test_reference_lists_every_option() -> None:
    from mysqlcdc.config.reference import render

    text = render()
    for model in _models(PipelineConfig):
        for name, field in model.model_fields.items():
            if not field.exclude:
                assert f"`{field.alias or name}`" in text, name
    assert textwrap.dedent(text).startswith("# ")


def test_reference_example_loads(tmp_path: Path) -> None:
    from mysqlcdc.config.reference import EXAMPLE

    cfg = load_pipeline(write(tmp_path, EXAMPLE), env=ENV)
    assert cfg.source.tables.include == ["shop.*"]


def test_docs_config_md_is_current() -> None:
    from mysqlcdc.config.reference import render

    page = Path(__file__).resolve().parents[3] / "docs" / "CONFIG.md"
    assert page.read_text() == render(), "run: python -m mysqlcdc.config.reference > docs/CONFIG.md"


# --- changelog formats -------------------------------------------------------


def test_delta_changelog_settings(tmp_path: Path) -> None:
    from mysqlcdc.sinks.changelog import from_sink_config

    text = FULL.replace("      partition_by: [db, table]\n",
                        "      partition_by: [db, table]\n      format: delta\n"
                        "      compact_every: 10m\n      retention: 30d\n      vacuum_after: 1h\n")
    cfg = load_pipeline(write(tmp_path, text), env=ENV)
    s = from_sink_config(cfg.sinks[0], cfg.name, 0)
    assert (s.format, s.compact_batches, s.compact_seconds) == ("delta", None, 600.0)
    assert (s.retention_s, s.vacuum_after_s, s.target_file_bytes) == (30 * 86400, 3600, 128 << 20)
    every = load_pipeline(write(tmp_path, text.replace("compact_every: 10m", "compact_every: 50")),
                          env=ENV)
    assert from_sink_config(every.sinks[0], every.name, 0).compact_batches == 50
    assert s.app_id("q1") == "mysqlcdc/shop-cdc/0-changelog/q1" != s.app_id("q2")


def test_retention_alone_maintains_hourly_and_parquet_takes_it(tmp_path: Path) -> None:
    from mysqlcdc.sinks.changelog import from_sink_config
    from mysqlcdc.sinks.changelog.settings import RETENTION_CHECK_S

    for fmt in ("delta", "parquet"):
        text = FULL.replace("      partition_by: [db, table]\n",
                            f"      partition_by: [db, table]\n      format: {fmt}\n"
                            "      retention: 2d\n")
        cfg = load_pipeline(write(tmp_path, text), env=ENV)
        s = from_sink_config(cfg.sinks[0], cfg.name, 0)
        assert (s.retention_s, s.compacts, s.maintains) == (2 * 86400, False, True)
        assert s.maintenance_every == (None, RETENTION_CHECK_S)


@pytest.mark.parametrize("extra, fragment", [
    ("compact_every: 10m", "needs `format: delta`"),
    ("format: iceberg", "'parquet' or 'delta'"),
    ("format: delta\n      retention: 30 days", "'30d'"),
    ("format: delta\n      compact_every: 0", "at least 1"),
])
def test_changelog_format_mistakes(tmp_path: Path, extra: str, fragment: str) -> None:
    text = FULL.replace("      partition_by: [db, table]\n",
                        f"      partition_by: [db, table]\n      {extra}\n")
    err = load_error(tmp_path, text)
    assert "sinks.0" in str(err) and fragment in str(err), str(err)
