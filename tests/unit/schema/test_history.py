"""SchemaHistory: versions by position, persistence, quarantine and resolution."""

from __future__ import annotations

import pickle

import pytest

from mysqlcdc.errors import ConfigError
from mysqlcdc.schema.history import HISTORY_FILE, Change, Quarantine, SchemaHistory
from mysqlcdc.schema.model import ColumnDef, TableDef
from mysqlcdc.types import BinlogPosition

P = BinlogPosition.of


def t(*names: str) -> TableDef:
    return TableDef("db", "t", tuple(ColumnDef(n, "int") for n in names))


def test_a_ddl_version_applies_after_its_position_a_bootstrap_at_it(tmp_path):
    h = SchemaHistory(tmp_path)
    h.bootstrap(P("bin.000001", 100), {("db", "t"): t("a")})
    h.record([Change(P("bin.000001", 500), "alter", "db", "t", t("a", "b"), "ALTER ...")])
    h.record([Change(P("bin.000002", 4), "drop", "db", "t", None, "DROP TABLE t")])
    assert h.definition("db", "t", P("bin.000001", 99)) is None
    assert h.definition("db", "t", P("bin.000001", 100)).column_names == ("a",)
    assert h.definition("db", "t", P("bin.000001", 500)).column_names == ("a",)
    assert h.definition("db", "t", P("bin.000001", 501)).column_names == ("a", "b")
    assert h.definition("db", "t", P("bin.000001", 900000)).column_names == ("a", "b")
    assert h.definition("db", "t", P("bin.000002", 5)) is None
    assert h.tables_at(P("bin.000001", 600)) == {("db", "t"): t("a", "b")}


def test_persisted_deduplicated_and_reloaded(tmp_path):
    h = SchemaHistory(tmp_path)
    h.bootstrap(P("bin.000001", 4), {("db", "t"): t("a")})
    change = Change(P("bin.000001", 500), "alter", "db", "t", t("a", "b"), "ALTER ...")
    h.record([change])
    h.record([change])            # a replayed batch records the same DDL again
    lines = (tmp_path / HISTORY_FILE).read_text().splitlines()
    assert len(lines) == 3        # table bootstrap, bootstrap marker, one change
    again = SchemaHistory(tmp_path)
    assert again.bootstrapped
    assert again.definition("db", "t", P("bin.000001", 501)) == t("a", "b")


def test_a_line_cut_short_at_the_end_is_ignored_elsewhere_it_is_an_error(tmp_path):
    h = SchemaHistory(tmp_path)
    h.bootstrap(P("bin.000001", 4), {("db", "t"): t("a")})
    path = tmp_path / HISTORY_FILE
    path.write_text(path.read_text() + '{"type": "change", "kind"')
    assert SchemaHistory(tmp_path).definition("db", "t", P("bin.000001", 9)) == t("a")
    path.write_text('{"type": "cha\n' + path.read_text())
    with pytest.raises(ConfigError, match="line 1"):
        SchemaHistory(tmp_path)


def test_an_append_after_a_writer_killed_mid_record_leaves_every_line_readable(tmp_path):
    """A writer killed inside its append leaves part of a record after the last newline;
    the next append used to glue its own record to that part, a line unreadable for good
    (the pipeline could not start again: seen after SIGTERM during a busy run)."""
    h = SchemaHistory(tmp_path)
    h.bootstrap(P("bin.000001", 4), {("db", "t"): t("a")})
    path = tmp_path / HISTORY_FILE
    change = Change(P("bin.000001", 500), "alter", "db", "t", t("a", "b"), "ALTER ...")
    whole = path.read_bytes()
    with open(path, "ab") as out:                # what the killed writer got out
        out.write(b'{"type": "change", "kind": "alter", "pos": {"fi')
    again = SchemaHistory(tmp_path)              # the next run: the torn tail is no record
    assert again.definition("db", "t", P("bin.000001", 501)) == t("a")
    again.record([change])                       # and it records the DDL again
    assert path.read_bytes().startswith(whole)
    assert all(line.endswith("}") for line in path.read_text().splitlines())
    third = SchemaHistory(tmp_path)
    assert third.definition("db", "t", P("bin.000001", 501)) == t("a", "b")


def test_a_quarantined_table_is_held_until_resolved_and_planned(tmp_path):
    h = SchemaHistory(tmp_path)
    h.bootstrap(P("bin.000001", 4), {("db", "t"): t("a")})
    q = Quarantine("db", "t", P("bin.000001", 700), P("bin.000001", 600), "cannot parse", "ALTER x")
    h.quarantine(q)
    assert h.is_quarantined("db", "t")
    view = h.view(batch_start=P("bin.000001", 600))
    assert not view.held("db", "t", P("bin.000001", 699))
    assert view.held("db", "t", P("bin.000001", 700))     # the TABLE_MAP that disagreed
    assert view.held("db", "t", P("bin.000001", 701))

    h.resolve("db", "t", "reload", t("a", "b", "c"))
    assert not h.is_quarantined("db", "t")
    # not yet planned: still held everywhere
    assert h.view(batch_start=P("bin.000002", 4)).held("db", "t", P("bin.000002", 10))
    (r,) = h.unplanned()
    h.mark_planned(r, P("bin.000002", 4))

    reread = SchemaHistory(tmp_path)          # the CLI and the pipeline share the file
    before = reread.view(batch_start=P("bin.000001", 600))
    after = reread.view(batch_start=P("bin.000002", 4))
    assert before.held("db", "t", P("bin.000001", 800))      # a replay of an older batch
    assert not after.held("db", "t", P("bin.000002", 10))
    assert after.definition("db", "t", P("bin.000001", 701)).column_names == ("a", "b", "c")
    (cq, _), = reread.catchups(P("bin.000002", 4))
    assert cq == q and reread.catchups(P("bin.000002", 99)) == []
    catchup = reread.view(batch_start=P("bin.000002", 4), catchup=cq)
    assert catchup.before_catchup((1, 699, 0)) and not catchup.before_catchup((1, 700, 0))
    assert not catchup.held("db", "t", P("bin.000001", 800))


def test_skip_holds_the_table_for_good(tmp_path):
    h = SchemaHistory(tmp_path)
    h.bootstrap(P("bin.000001", 4), {("db", "t"): t("a")})
    h.quarantine(Quarantine("db", "t", P("bin.000001", 700), P("bin.000001", 4), "x"))
    h.resolve("db", "t", "skip", None)
    (r,) = h.unplanned()
    h.mark_planned(r, P("bin.000001", 900))
    assert h.skipped("db", "t")
    assert h.view(batch_start=P("bin.000003", 4)).held("db", "t", P("bin.000003", 5))
    assert h.catchups(P("bin.000001", 900)) == []
    with pytest.raises(ConfigError, match="not quarantined"):
        h.resolve("db", "t", "skip", None)


@pytest.mark.parametrize("action", ["reload", "skip"])
def test_a_resolution_written_ahead_waits_for_its_quarantine(tmp_path, action):
    """A sink behind another has not met the DDL the other quarantined at: the resolution
    written ahead into its history changes nothing until its own stream quarantines the
    table at that position; from the next batch on it is in force as if written then."""
    h = SchemaHistory(tmp_path)
    h.bootstrap(P("bin.000001", 4), {("db", "t"): t("a")})
    h.resolve_ahead("db", "t", P("bin.000001", 700), action,
                    t("a", "b") if action == "reload" else None)
    assert list(h.unplanned()) == [] and not h.skipped("db", "t")     # not there yet
    assert not h.is_quarantined("db", "t")
    early = h.view(batch_start=P("bin.000001", 600))
    assert not early.held("db", "t", P("bin.000001", 650))
    assert early.definition("db", "t", P("bin.000001", 650)).column_names == ("a",)

    q = Quarantine("db", "t", P("bin.000001", 700), P("bin.000001", 600), "cannot parse", "ALTER")
    h.quarantine(q)                          # its stream gets there
    assert h.has_quarantine("db", "t", P("bin.000001", 700)) and not h.is_quarantined("db", "t")
    assert h.view(batch_start=P("bin.000001", 600)).held("db", "t", P("bin.000001", 701))
    (r,) = h.unplanned()
    h.mark_planned(r, P("bin.000001", 900))
    later = SchemaHistory(tmp_path).view(batch_start=P("bin.000001", 900))
    if action == "reload":
        assert not later.held("db", "t", P("bin.000001", 901))
        assert later.definition("db", "t", P("bin.000001", 701)).column_names == ("a", "b")
        (cq, _), = h.catchups(P("bin.000001", 900))
        assert cq == q                       # the held rows are read again
    else:
        assert h.skipped("db", "t") and later.held("db", "t", P("bin.000001", 901))


def test_view_pickles_and_filters_tables():
    h = SchemaHistory()
    h.bootstrap(P("bin.000001", 4), {("db", "t"): t("a"), ("db", "u"): t("x")})
    h.record([Change(P("bin.000001", 50), "truncate", "db", "t", t("a"), "TRUNCATE t", None,
                     t("a"))])
    view = pickle.loads(pickle.dumps(h.view(lambda db, table: table == "t")))
    assert view.known("db", "t") and not view.known("db", "u")
    assert view.definition("db", "t", P("bin.000001", 60)) == t("a")
    assert [c.kind for c in view.changes_at("bin.000001", 50)] == ["truncate"]


def test_timeline_lists_versions_and_quarantines_in_order(tmp_path):
    h = SchemaHistory(tmp_path)
    h.bootstrap(P("bin.000001", 4), {("db", "t"): t("a")})
    h.record([Change(P("bin.000001", 500), "alter", "db", "t", t("a", "b"), "ALTER TABLE t ADD b INT")])
    h.quarantine(Quarantine("db", "t", P("bin.000001", 900), P("bin.000001", 800), "cannot parse"))
    rows = h.timeline("db", "t")
    assert [r["what"] for r in rows] == ["bootstrap", "alter", "quarantine"]
    assert rows[1]["names"] == ["a", "b"] and rows[2]["resolved"] is None


def test_a_statements_changes_keep_its_order_also_after_reloading(tmp_path):
    """``RENAME TABLE s TO s_old, s_new TO s`` is a swap only in that order; the view
    listed a position's changes by table (``s`` first: its versions were seen first)."""
    def d(name: str) -> TableDef:
        return TableDef("db", name, (ColumnDef("a", "int"),))

    h = SchemaHistory(tmp_path)
    h.bootstrap(P("bin.000001", 100), {("db", "s"): d("s"), ("db", "s_new"): d("s_new")})
    at, ddl = P("bin.000001", 700), "RENAME TABLE s TO s_old, s_new TO s"
    h.record([Change(at, "rename", "db", "s", None, ddl, before=d("s")),
              Change(at, "rename", "db", "s_old", d("s_old"), ddl, ("db", "s"), d("s")),
              Change(at, "rename", "db", "s_new", None, ddl, before=d("s_new")),
              Change(at, "rename", "db", "s", d("s"), ddl, ("db", "s_new"), d("s_new"))])
    want = [("s", None), ("s_old", "s"), ("s_new", None), ("s", "s_new")]
    for history in (h, SchemaHistory(tmp_path)):
        got = [(c.table, c.old[1] if c.old else None)
               for c in history.view().changes_at("bin.000001", 700)]
        assert got == want
