"""load_tables() against the session mariadbd."""

from __future__ import annotations

import pytest

from mysqlcdc.schema.introspect import SYSTEM_SCHEMAS, load_tables, parse_labels
from mysqlcdc.schema.model import ColumnDef

pytestmark = pytest.mark.integration


@pytest.fixture
def tables(mariadb, fresh_db):
    mariadb.sql(
        """CREATE TABLE orders (
             id BIGINT UNSIGNED NOT NULL,
             region CHAR(2) CHARACTER SET latin1 NOT NULL,
             amount DECIMAL(10,2) UNSIGNED,
             note VARCHAR(20),
             raw VARBINARY(8),
             doc BLOB,
             state ENUM('new', 'it''s done', 'a,b', 'back\\\\slash') NOT NULL DEFAULT 'new',
             tags SET('x', 'y''z', 'line\\nbreak'),
             PRIMARY KEY (region, id))""",
        "CREATE TABLE no_key (a INT, b TINYINT)",
        "CREATE VIEW v_orders AS SELECT id FROM orders",
        "ALTER TABLE no_key ADD COLUMN first_col INT FIRST",
        db=fresh_db,
    )
    conn = mariadb.connect()
    try:
        yield fresh_db, load_tables(conn, lambda db, table: db == fresh_db)
    finally:
        conn.close()


def test_tables_columns_in_ordinal_order_without_views(tables):
    db, found = tables
    assert sorted(found) == [(db, "no_key"), (db, "orders")]
    assert found[(db, "no_key")].column_names == ("first_col", "a", "b")
    assert found[(db, "orders")].column_names == (
        "id", "region", "amount", "note", "raw", "doc", "state", "tags")


def test_primary_key_unsigned_nullable_and_charsets(tables):
    db, found = tables
    orders = {c.name: c for c in found[(db, "orders")].columns}
    assert found[(db, "orders")].primary_key == ("id", "region")
    assert found[(db, "no_key")].primary_key == ()
    assert orders["id"] == ColumnDef("id", "bigint", unsigned=True, is_primary_key=True,
                                     nullable=False, column_type="bigint(20) unsigned")
    assert orders["amount"].unsigned and orders["amount"].column_type == "decimal(10,2) unsigned"
    assert (orders["region"].charset, orders["note"].charset) == ("latin1", "utf8mb4")
    assert (orders["raw"].charset, orders["doc"].charset, orders["amount"].charset) == \
        ("binary", "binary", None)
    assert orders["note"].nullable and not orders["state"].nullable


def test_enum_and_set_labels_with_quotes_commas_and_backslashes(tables):
    db, found = tables
    orders = {c.name: c for c in found[(db, "orders")].columns}
    assert orders["state"].enum_values == ("new", "it's done", "a,b", "back\\slash")
    assert orders["tags"].set_values == ("x", "y'z", "line\nbreak")
    assert orders["state"].set_values == () and orders["tags"].enum_values == ()


def test_system_schemas_are_never_loaded_and_no_filter_loads_all(mariadb, tables):
    db, _ = tables
    conn = mariadb.connect()
    try:
        everything = load_tables(conn, None)
    finally:
        conn.close()
    assert (db, "orders") in everything
    assert not {schema for schema, _ in everything} & SYSTEM_SCHEMAS


def test_parse_labels_edge_cases():
    assert parse_labels("enum('')") == ("",)
    assert parse_labels("set('''','(',')')") == ("'", "(", ")")


def test_system_versioned_tables_show_their_period_columns(mariadb, fresh_db):
    """WITH SYSTEM VERSIONING alone hides row_start and row_end from information_schema
    while the binlog carries them last: the definition lists them. Period columns named
    in the definition are listed where they stand, marked."""
    from mysqlcdc.schema.introspect import load_table

    mariadb.sql("CREATE TABLE hist (id INT PRIMARY KEY, v INT) WITH SYSTEM VERSIONING",
                "CREATE TABLE named (id INT PRIMARY KEY, s TIMESTAMP(6) GENERATED ALWAYS AS "
                "ROW START, e TIMESTAMP(6) GENERATED ALWAYS AS ROW END, v INT, "
                "PERIOD FOR SYSTEM_TIME (s, e)) WITH SYSTEM VERSIONING", db=fresh_db)
    conn = mariadb.connect()
    try:
        found = load_tables(conn, lambda d, t: d == fresh_db)
        hist, named = found[(fresh_db, "hist")], found[(fresh_db, "named")]
        assert hist.column_names == ("id", "v", "row_start", "row_end") and hist.versioned
        assert [c.system for c in hist.columns] == [None, None, "row_start", "row_end"]
        assert named.column_names == ("id", "s", "e", "v") and named.versioned
        assert [c.system for c in named.columns] == [None, "row_start", "row_end", None]
        assert load_table(conn, fresh_db, "hist") == hist
        assert load_table(conn, fresh_db, "named") == named
    finally:
        conn.close()


def test_a_table_versioned_by_transaction_ids_stops_the_pipeline_before_it_reads(
        mariadb, fresh_db, source_options):
    """MariaDB logs such a table's changes as statements, even under binlog_format=ROW:
    the stream would never see them. Refused at the start, by name; left out of the
    capture, the other tables go on."""
    from mysqlcdc.capture.planner import RangePlanner
    from mysqlcdc.errors import UnsupportedTableError
    from mysqlcdc.spark.options import SourceOptions

    from tests.support.mariadb import binlog_position

    mariadb.sql("CREATE TABLE kept (id INT PRIMARY KEY) WITH SYSTEM VERSIONING",
                "CREATE TABLE trx (id INT PRIMARY KEY, s BIGINT UNSIGNED GENERATED ALWAYS AS "
                "ROW START INVISIBLE, e BIGINT UNSIGNED GENERATED ALWAYS AS ROW END INVISIBLE, "
                "PERIOD FOR SYSTEM_TIME (s, e)) ENGINE=InnoDB WITH SYSTEM VERSIONING",
                "INSERT INTO trx (id) VALUES (1)", db=fresh_db)
    at = binlog_position(mariadb)
    logged = [e[2] for e in mariadb.sql(f"SHOW BINLOG EVENTS IN '{at.file}'")
              if "INSERT INTO trx" in e[5]]
    assert logged == ["Query"]     # logged as a statement, not as rows: what is refused

    def ensure(**tables):
        planner = RangePlanner(SourceOptions.parse(source_options(
            startingPosition=str(at), **tables)))
        try:
            planner.keeper.ensure(at, at, lambda a, b, observe: None)
        finally:
            planner.close()

    with pytest.raises(UnsupportedTableError) as info:
        ensure(include=f"{fresh_db}.*")
    assert info.value.code == "TABLE_UNSUPPORTED" and f"{fresh_db}.trx" in info.value.message
    assert f"{fresh_db}.kept" not in info.value.message and "statements" in info.value.message
    ensure(include=f"{fresh_db}.*", exclude=f"{fresh_db}.trx")
