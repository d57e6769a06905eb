"""apply_ddl, classify and targets without a server (the server check is
tests/integration/test_ddl_differential.py)."""

from __future__ import annotations

import json
import pickle

import pytest

from mysqlcdc.errors import SchemaError, UnsupportedDdlError
from mysqlcdc.schema.ddl import Catalog, TableChange, apply_ddl, classify, targets
from mysqlcdc.schema.model import ColumnDef, TableDef

pytestmark = pytest.mark.unit

DB = "app"


def catalog(*statements: str) -> Catalog:
    cat = Catalog(databases={DB: "utf8mb4", "other": "latin1"},
                  explicit_defaults_for_timestamp=True)
    for sql in statements:
        cat.execute(sql, DB)
    return cat


def cols(cat: Catalog, table: str, db: str = DB) -> dict[str, ColumnDef]:
    return {c.name: c for c in cat.tables[(db, table)].columns}


def names(cat: Catalog, table: str, db: str = DB) -> tuple[str, ...]:
    return cat.tables[(db, table)].column_names


def unsupported(cat: Catalog, sql: str, db: str | None = DB) -> UnsupportedDdlError:
    with pytest.raises(UnsupportedDdlError) as info:
        apply_ddl(cat, sql, db)
    return info.value


# --------------------------------------------------------------------------- CREATE TABLE

def test_create_table_types_and_attributes():
    cat = catalog(
        "CREATE TABLE t (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT, "
        "v VARCHAR(10) CHARACTER SET latin1 COLLATE latin1_bin DEFAULT 'x', "
        "e ENUM('a', 'it''s ', 'back\\\\slash') DEFAULT 'a', s SET('x','y'), "
        "d DECIMAL(10,2) UNSIGNED ZEROFILL, f FLOAT(7,3), g DOUBLE, dt DATETIME(3) "
        "ON UPDATE CURRENT_TIMESTAMP(3), b BIT(5), raw VARBINARY(8), blb BLOB, c CHAR, "
        "tx TEXT COMMENT 'note', j JSON, y YEAR, n INT NULL DEFAULT NULL, "
        "PRIMARY KEY (id), KEY k (v), UNIQUE KEY (e)) ENGINE=InnoDB")
    c = cols(cat, "t")
    assert c["id"] == ColumnDef("id", "bigint", unsigned=True, is_primary_key=True, nullable=False,
                                column_type="bigint(20) unsigned")
    assert (c["v"].data_type, c["v"].charset, c["v"].length, c["v"].column_type) == \
        ("varchar", "latin1", 10, "varchar(10)")
    assert c["e"].enum_values == ("a", "it's", "back\\slash")
    assert c["e"].column_type == "enum('a','it''s','back\\\\slash')"
    assert c["s"].set_values == ("x", "y") and c["s"].charset == "utf8mb4"
    assert (c["d"].precision, c["d"].scale, c["d"].unsigned, c["d"].column_type) == \
        (10, 2, True, "decimal(10,2) unsigned zerofill")
    assert c["f"].column_type == "float(7,3)" and c["g"].data_type == "double"
    assert (c["dt"].fsp, c["dt"].column_type) == (3, "datetime(3)")
    assert (c["b"].length, c["b"].column_type) == (5, "bit(5)")
    assert (c["raw"].charset, c["raw"].length, c["blb"].charset) == ("binary", 8, "binary")
    assert (c["c"].length, c["c"].column_type) == (1, "char(1)")
    assert (c["j"].data_type, c["j"].charset) == ("longtext", "utf8mb4")
    assert c["y"].column_type == "year(4)" and c["n"].nullable
    assert cat.tables[(DB, "t")].primary_key == ("id",)
    assert cat.tables[(DB, "t")].charset == "utf8mb4"


def test_create_table_server_spellings():
    cat = catalog(
        "CREATE TABLE t (a INT8, b MIDDLEINT, c LONG, d REAL, e FLOAT(30), f BOOL, g SERIAL, "
        "h NCHAR(2), i NATIONAL VARCHAR(3), j CHAR(3) BYTE, k VARCHAR(3) CHARACTER SET binary, "
        "l FIXED(5), m DOUBLE PRECISION, n INET6, o LONG VARBINARY, p TEXT(100), "
        "q TEXT(100) CHARSET latin1, r VARCHAR(2) ASCII, s TINYINT(1))")
    c = cols(cat, "t")
    assert [c[x].data_type for x in "abcdefg"] == \
        ["bigint", "mediumint", "mediumtext", "double", "double", "tinyint", "bigint"]
    assert c["f"].column_type == "tinyint(1)" and not c["g"].nullable and c["g"].unsigned
    assert (c["h"].charset, c["i"].charset) == ("utf8mb3", "utf8mb3")
    assert (c["j"].data_type, c["k"].data_type, c["k"].charset) == ("binary", "varbinary", "binary")
    assert (c["l"].precision, c["l"].scale) == (5, 0)
    assert (c["n"].data_type, c["o"].data_type) == ("inet6", "mediumblob")
    assert (c["p"].data_type, c["q"].data_type) == ("text", "tinytext")  # 400 bytes, 100 bytes
    assert c["r"].charset == "latin1"


def test_inline_and_table_level_primary_keys_force_not_null():
    cat = catalog("CREATE TABLE a (id INT PRIMARY KEY, v INT)",
                  "CREATE TABLE b (x INT NULL, y VARCHAR(3), "
                  "CONSTRAINT pk PRIMARY KEY (y(2), x DESC))",
                  "CREATE TABLE c (id INT KEY)")
    assert cat.tables[(DB, "a")].primary_key == ("id",)
    assert cat.tables[(DB, "b")].primary_key == ("x", "y")
    assert not cols(cat, "b")["x"].nullable and cols(cat, "a")["v"].nullable
    assert cat.tables[(DB, "c")].primary_key == ("id",)


def test_charsets_from_table_database_and_collation():
    cat = catalog("CREATE TABLE a (v VARCHAR(3), w VARCHAR(3) COLLATE utf8mb4_bin) CHARSET=latin1",
                  "CREATE TABLE other.b (v VARCHAR(3))",
                  "CREATE TABLE c (v CHAR(3)) COLLATE utf8_general_ci",
                  "CREATE TABLE d (v CHAR(3) CHARSET utf8)")
    assert cat.tables[(DB, "a")].charset == "latin1"
    assert (cols(cat, "a")["v"].charset, cols(cat, "a")["w"].charset) == ("latin1", "utf8mb4")
    assert cols(cat, "b", "other")["v"].charset == "latin1"
    assert cols(cat, "c")["v"].charset == "utf8mb3" == cols(cat, "d")["v"].charset


def test_generated_and_invisible_columns():
    cat = catalog("CREATE TABLE g (a INT, b INT AS (a + 1) VIRTUAL, c INT AS (a) PERSISTENT, "
                  "d INT GENERATED ALWAYS AS (a * 2) STORED, e INT INVISIBLE, f INT AS (a))")
    c = cols(cat, "g")
    assert [c[x].generated for x in "abcdef"] == [False, True, True, True, False, True]
    assert c["e"].invisible and not c["a"].invisible


def test_timestamp_nullability_depends_on_the_server_setting():
    assert cols(catalog("CREATE TABLE t (a TIMESTAMP, b TIMESTAMP NOT NULL)"), "t")["a"].nullable
    off = Catalog(databases={DB: "utf8mb4"}, explicit_defaults_for_timestamp=False)
    off.execute("CREATE TABLE t (a TIMESTAMP, b TIMESTAMP NULL)", DB)
    assert not cols(off, "t")["a"].nullable and cols(off, "t")["b"].nullable
    unknown = Catalog(databases={DB: "utf8mb4"})
    assert unknown.execute("CREATE TABLE t (a TIMESTAMP NULL)", DB)
    err = unsupported(unknown, "CREATE TABLE u (a TIMESTAMP)")
    assert err.tables == {(DB, "u")}


def test_if_not_exists_like_or_replace_and_temporary():
    cat = catalog("CREATE TABLE a (id INT PRIMARY KEY, v TEXT)")
    assert apply_ddl(cat, "CREATE TABLE IF NOT EXISTS a (z INT)", DB) == []
    [like] = apply_ddl(cat, "CREATE TABLE b LIKE a", DB)
    assert like.kind == "create" and like.after.name == "b" and like.after.columns == \
        cat.tables[(DB, "a")].columns
    assert apply_ddl(cat, "CREATE TABLE IF NOT EXISTS c (LIKE a)", DB)[0].after.name == "c"
    [rep] = apply_ddl(cat, "CREATE OR REPLACE TABLE a (z INT)", DB)
    assert rep.before.column_names == ("id", "v") and rep.after.column_names == ("z",)
    assert apply_ddl(cat, "CREATE TEMPORARY TABLE t (x INT)", DB) == []
    assert unsupported(cat, "CREATE TEMPORARY TABLE a (x INT)").tables == {(DB, "a")}


def test_with_system_versioning_adds_its_hidden_period_columns_last():
    """WITH SYSTEM VERSIONING alone gives a table two hidden columns, row_start and
    row_end, that information_schema does not list and the binlog carries last; they
    stay last through later ALTERs, go with DROP SYSTEM VERSIONING, come with ADD."""
    cat = catalog("CREATE TABLE t (id INT PRIMARY KEY, v INT) WITH SYSTEM VERSIONING")
    assert names(cat, "t") == ("id", "v", "row_start", "row_end")
    row_end = cols(cat, "t")["row_end"]
    assert row_end.system == "row_end" and row_end.invisible and row_end.fsp == 6
    assert cat.tables[(DB, "t")].versioned and cat.tables[(DB, "t")].primary_key == ("id",)
    cat.execute("ALTER TABLE t ADD COLUMN w INT, ADD COLUMN f INT FIRST", DB)
    assert names(cat, "t") == ("f", "id", "v", "w", "row_start", "row_end")
    cat.execute("CREATE TABLE u LIKE t", DB)
    assert names(cat, "u") == names(cat, "t")
    cat.execute("ALTER TABLE t DROP SYSTEM VERSIONING", DB)
    assert names(cat, "t") == ("f", "id", "v", "w") and not cat.tables[(DB, "t")].versioned
    cat.execute("ALTER TABLE t ADD SYSTEM VERSIONING", DB)
    assert names(cat, "t")[-2:] == ("row_start", "row_end")
    # the history keeps the marks
    again = TableDef.from_json(json.loads(json.dumps(cat.tables[(DB, "t")].to_json())))
    assert again == cat.tables[(DB, "t")]


def test_named_period_columns_are_marked_where_they_stand():
    """Period columns named in the definition are listed where they are, marked; no
    hidden pair is added. A versioned column makes its table versioned. Versioning by
    transaction ids (its changes are logged as statements) and DROP SYSTEM VERSIONING of
    named columns stop the table (quarantine)."""
    cat = catalog(
        "CREATE TABLE s (id INT PRIMARY KEY, a TIMESTAMP(6) GENERATED ALWAYS AS ROW START, "
        "b TIMESTAMP(6) GENERATED ALWAYS AS ROW END, v INT, PERIOD FOR SYSTEM_TIME (a, b)) "
        "WITH SYSTEM VERSIONING",
        "CREATE TABLE c (id INT PRIMARY KEY, v INT WITH SYSTEM VERSIONING, w INT)")
    trx = unsupported(cat, "CREATE TABLE x (id INT PRIMARY KEY, ts BIGINT UNSIGNED GENERATED "
                           "ALWAYS AS ROW START INVISIBLE, te BIGINT UNSIGNED GENERATED ALWAYS "
                           "AS ROW END INVISIBLE, PERIOD FOR SYSTEM_TIME (ts, te)) "
                           "ENGINE=InnoDB WITH SYSTEM VERSIONING")
    assert trx.tables == {(DB, "x")} and "statements" in trx.message
    assert names(cat, "s") == ("id", "a", "b", "v") and cat.tables[(DB, "s")].versioned
    assert (cols(cat, "s")["a"].system, cols(cat, "s")["b"].system) == ("row_start", "row_end")
    assert not cols(cat, "s")["b"].nullable and cols(cat, "s")["v"].system is None
    assert (DB, "x") not in cat.tables       # by transaction ids: changes logged as statements
    assert names(cat, "c") == ("id", "v", "w", "row_start", "row_end")
    cat.execute("ALTER TABLE s ADD COLUMN z INT", DB)
    assert names(cat, "s") == ("id", "a", "b", "v", "z")
    err = unsupported(cat, "ALTER TABLE s DROP SYSTEM VERSIONING")
    assert err.tables == {(DB, "s")} and "named" in err.message


def test_create_select_is_refused_but_the_logged_rewrite_is_applied():
    cat = catalog("CREATE TABLE a (id INT PRIMARY KEY)")
    assert unsupported(cat, "CREATE TABLE b AS SELECT * FROM a").tables == {(DB, "b")}
    assert unsupported(cat, "CREATE TABLE b (x INT) SELECT * FROM a").tables == {(DB, "b")}
    # what MariaDB writes to a ROW-format binlog for CREATE TABLE b (PRIMARY KEY (id)) SELECT ...
    logged = ("CREATE TABLE `b` (\n  `id` int(11) NOT NULL,\n  `two` int(3) NOT NULL,\n"
              "  PRIMARY KEY (`id`)\n)")
    [change] = apply_ddl(cat, logged, DB)
    assert change.after.primary_key == ("id",) and change.after.column_names == ("id", "two")


def test_server_comments_versioned_comments_and_odd_identifiers():
    cat = catalog("CREATE TABLE /* hi */ `we``ird.n ü` (`c ol` INT, `select` INT) "
                  "/*!50100 ENGINE=InnoDB */ /*!40101 DEFAULT CHARSET=latin1 */ -- trailing")
    assert names(cat, "we`ird.n ü") == ("c ol", "select")
    assert cat.tables[(DB, "we`ird.n ü")].charset == "latin1"
    cat.execute("/*!40000 ALTER TABLE `we``ird.n ü` DISABLE KEYS */", DB)
    cat.execute("/*M!100100 ALTER TABLE `we``ird.n ü` ADD x INT */", DB)
    assert names(cat, "we`ird.n ü")[-1] == "x"
    cat.execute("DROP TABLE IF EXISTS `we``ird.n ü` /* generated by server */", DB)
    assert cat.tables == {}


def test_qualified_names_and_default_database():
    cat = catalog("CREATE TABLE other.t (a INT)", "CREATE TABLE `app`.`u` (a INT)")
    assert set(cat.tables) == {("other", "t"), (DB, "u")}
    assert unsupported(cat, "CREATE TABLE v (a INT)", None).tables is None


def test_sequences_are_tables():
    cat = catalog("CREATE SEQUENCE s START WITH 10 INCREMENT BY 2")
    assert names(cat, "s")[0] == "next_not_cached_value" and len(names(cat, "s")) == 8
    cat.execute("DROP SEQUENCE s", DB)
    assert cat.tables == {}


# --------------------------------------------------------------------------- ALTER TABLE

BASE = "CREATE TABLE t (a INT, b INT, c INT)"


def test_alter_add_drop_modify_change_rename_in_one_statement():
    cat = catalog(BASE)
    [change] = apply_ddl(cat, "ALTER TABLE t ADD d VARCHAR(3) AFTER a2, DROP COLUMN b, "
                              "MODIFY c BIGINT NOT NULL FIRST, CHANGE a a2 INT UNSIGNED, "
                              "ADD COLUMN (e INT, f INT)", DB)
    assert change.kind == "alter" and change.before.column_names == ("a", "b", "c")
    assert change.after.column_names == ("c", "a2", "d", "e", "f")
    c = {x.name: x for x in change.after.columns}
    assert c["c"].data_type == "bigint" and not c["c"].nullable and c["a2"].unsigned
    cat.apply([change])
    cat.execute("ALTER TABLE t RENAME COLUMN e TO e2, ADD g INT AFTER e2", DB)
    assert names(cat, "t") == ("c", "a2", "d", "e2", "g", "f")


def test_alter_positions_follow_the_server_order():
    # changed columns without a position stay; others are placed in statement order
    cat = catalog(BASE, "ALTER TABLE t CHANGE a a2 INT AFTER c, ADD d INT AFTER a2, "
                        "MODIFY b INT FIRST")
    assert names(cat, "t") == ("b", "c", "a2", "d")
    assert unsupported(cat, "ALTER TABLE t ADD x INT AFTER nothere").tables == {(DB, "t")}


def test_if_exists_and_if_not_exists_look_at_the_table_before_the_statement():
    cat = catalog(BASE, "ALTER TABLE t ADD COLUMN IF NOT EXISTS a INT, ADD COLUMN IF NOT EXISTS d INT",
                  "ALTER TABLE t DROP COLUMN IF EXISTS zz, MODIFY IF EXISTS zz INT, "
                  "CHANGE COLUMN IF EXISTS yy y INT")
    assert names(cat, "t") == ("a", "b", "c", "d")
    cat.execute("ALTER TABLE t DROP b, ADD COLUMN IF NOT EXISTS b INT", DB)
    assert names(cat, "t") == ("a", "c", "d")
    assert unsupported(cat, "ALTER TABLE t DROP COLUMN zz").tables == {(DB, "t")}


def test_primary_key_changes():
    cat = catalog("CREATE TABLE t (id INT, email VARCHAR(9), n INT)",
                  "ALTER TABLE t ADD PRIMARY KEY (id, email)")
    assert cat.tables[(DB, "t")].primary_key == ("id", "email")
    assert not cols(cat, "t")["email"].nullable
    cat.execute("ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (n)", DB)
    assert cat.tables[(DB, "t")].primary_key == ("n",) and not cols(cat, "t")["email"].nullable
    cat.execute("ALTER TABLE t CHANGE n n2 BIGINT", DB)
    assert cat.tables[(DB, "t")].primary_key == ("n2",)
    cat.execute("DROP INDEX `PRIMARY` ON t", DB)
    assert cat.tables[(DB, "t")].primary_key == ()
    cat.execute("ALTER TABLE t MODIFY id INT PRIMARY KEY", DB)
    assert cat.tables[(DB, "t")].primary_key == ("id",)
    cat.execute("ALTER TABLE t DROP COLUMN id", DB)  # the key's only column: the key goes too
    assert cat.tables[(DB, "t")].primary_key == ()


def test_index_options_and_clauses_do_not_change_columns():
    cat = catalog(BASE)
    before = cat.tables[(DB, "t")]
    for sql in ["ALTER TABLE t ADD INDEX i (a), ADD UNIQUE KEY u (b), ALGORITHM=INPLACE, LOCK=NONE",
                "ALTER TABLE t DROP INDEX i, DROP KEY u, ADD FULLTEXT KEY ft (c)",
                "ALTER ONLINE TABLE t ENGINE=InnoDB ROW_FORMAT=DYNAMIC COMMENT='x' FORCE",
                "ALTER TABLE t WAIT 5 ALTER COLUMN a SET DEFAULT 3, ALTER b DROP DEFAULT",
                "ALTER TABLE t NOWAIT ADD CONSTRAINT ck CHECK (a > 0), DROP CONSTRAINT ck",
                "ALTER TABLE t ADD FOREIGN KEY (a) REFERENCES u (id) ON DELETE SET NULL",
                "ALTER TABLE t RENAME INDEX i TO j, ORDER BY a",
                "ALTER TABLE t ORDER BY a DESC, b, c ASC",
                "ALTER TABLE t ORDER BY a, b, ALGORITHM=COPY",
                "ALTER TABLE t DROP PARTITION p0, p1",
                "ALTER TABLE t TRUNCATE PARTITION p0, p1",
                "ALTER TABLE t ADD PARTITION (PARTITION p3 VALUES LESS THAN (30))",
                "ALTER TABLE t REORGANIZE PARTITION p0, p1 INTO (PARTITION p01 VALUES LESS THAN (20))",
                "ALTER TABLE t EXCHANGE PARTITION p0 WITH TABLE u WITHOUT VALIDATION",
                "ALTER TABLE t PARTITION BY HASH (a) PARTITIONS 4",
                "ALTER TABLE t COALESCE PARTITION 2", "ALTER TABLE t REMOVE PARTITIONING"]:
        [change] = apply_ddl(cat, sql, DB)
        assert change.after == before, sql


def test_convert_to_character_set_promotes_text_types():
    cat = catalog("CREATE TABLE t (a TINYTEXT, b TEXT, c MEDIUMTEXT, d LONGTEXT, e VARCHAR(10), "
                  "f TINYBLOB, g ENUM('x'), h INT) CHARSET latin1",
                  "ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4")
    c = cols(cat, "t")
    assert [c[x].data_type for x in "abcd"] == ["text", "mediumtext", "longtext", "longtext"]
    assert {c[x].charset for x in "abcdeg"} == {"utf8mb4"}
    assert (c["f"].charset, c["h"].charset) == ("binary", None)
    assert cat.tables[(DB, "t")].charset == "utf8mb4"
    cat.execute("ALTER TABLE t CONVERT TO CHARACTER SET latin1 COLLATE latin1_bin", DB)
    assert [cols(cat, "t")[x].data_type for x in "abcd"] == \
        ["text", "mediumtext", "longtext", "longtext"]  # never smaller


def test_default_charset_applies_to_new_and_modified_columns_only():
    cat = catalog("CREATE TABLE t (a VARCHAR(3), b VARCHAR(3)) CHARSET latin1",
                  "ALTER TABLE t ADD c VARCHAR(3), DEFAULT CHARSET=utf8mb4")
    c = cols(cat, "t")
    assert (c["a"].charset, c["c"].charset) == ("latin1", "utf8mb4")
    cat.execute("ALTER TABLE t MODIFY a VARCHAR(4)", DB)  # MODIFY takes the table default
    assert cols(cat, "t")["a"].charset == "utf8mb4" and cols(cat, "t")["b"].charset == "latin1"
    cat.execute("ALTER TABLE t COLLATE latin1_swedish_ci", DB)
    assert cat.tables[(DB, "t")].charset == "latin1"


def test_invisible_and_generated_through_alter():
    cat = catalog(BASE, "ALTER TABLE t ADD v INT AS (a + 1) VIRTUAL AFTER a, MODIFY b INT INVISIBLE")
    assert cols(cat, "t")["v"].generated and cols(cat, "t")["b"].invisible
    cat.execute("ALTER TABLE t MODIFY b INT", DB)
    assert not cols(cat, "t")["b"].invisible


def test_alter_rename_to():
    cat = catalog(BASE)
    [change] = apply_ddl(cat, "ALTER TABLE t RENAME TO other.u, ADD d INT", DB)
    assert change.kind == "rename" and change.old == (DB, "t")
    assert (change.db, change.table, change.after.db, change.after.name) == \
        ("other", "u", "other", "u")
    assert change.after.column_names == ("a", "b", "c", "d")
    assert targets("ALTER TABLE t RENAME TO other.u, ADD d INT", DB) == {(DB, "t"), ("other", "u")}


# --------------------------------------------------------------------------- RENAME / DROP / TRUNCATE

def test_rename_swap_as_online_schema_change_tools_do():
    cat = catalog("CREATE TABLE a (x INT)", "CREATE TABLE b (y INT)")
    changes = apply_ddl(cat, "RENAME TABLE a TO tmp, b TO a, tmp TO b", DB)
    assert [(c.kind, c.old, c.table) for c in changes] == \
        [("rename", (DB, "a"), "tmp"), ("rename", (DB, "b"), "a"), ("rename", (DB, "tmp"), "b")]
    cat.apply(changes)
    assert names(cat, "a") == ("y",) and names(cat, "b") == ("x",) and len(cat.tables) == 2
    assert targets("RENAME TABLE a TO tmp, b TO a, tmp TO b", DB) == \
        {(DB, "a"), (DB, "b"), (DB, "tmp")}


def test_gh_ost_cut_over():
    cat = catalog("CREATE TABLE t (id INT PRIMARY KEY)", "CREATE TABLE _t_gho LIKE t",
                  "ALTER TABLE _t_gho ADD COLUMN v INT",
                  "RENAME TABLE `t` TO `_t_del`, `_t_gho` TO `t`",
                  "DROP TABLE IF EXISTS `_t_del` /* generated by server */")
    assert set(cat.tables) == {(DB, "t")} and names(cat, "t") == ("id", "v")


def test_gh_ost_statements_as_it_writes_them():
    cat = catalog("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(3))")
    for sql in [
        "create /* gh-ost */ table `app`.`_t_ghc` (id bigint auto_increment, last_update "
        "timestamp not null DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, hint "
        "varchar(64) charset ascii not null, value varchar(4096) charset ascii not null, "
        "primary key(id), unique key hint_uidx(hint)) auto_increment=256",
        "create /* gh-ost */ table `app`.`_t_gho` like `app`.`t`",
        "alter /* gh-ost */ table `app`.`_t_gho` add column w int not null default 0",
        "create /* gh-ost */ table `app`.`_t_del` (id int auto_increment primary key) "
        "engine=InnoDB comment='ghost-cut-over-sentry'",
        "drop /* gh-ost */ table if exists `app`.`_t_del`",
        "rename /* gh-ost */ table `app`.`t` to `app`.`_t_del`, `app`.`_t_gho` to `app`.`t`",
        "drop /* gh-ost */ table if exists `app`.`_t_ghc`",
    ]:
        assert classify(sql) == "ddl", sql
        cat.execute(sql, None)
    assert sorted(cat.tables) == [(DB, "_t_del"), (DB, "t")]
    assert names(cat, "t") == ("id", "v", "w") and names(cat, "_t_del") == ("id", "v")


def test_drop_table_several_if_exists_and_temporary():
    cat = catalog("CREATE TABLE a (x INT)", "CREATE TABLE other.b (x INT)")
    changes = apply_ddl(cat, "DROP TABLE IF EXISTS a, other.b, nothere", DB)
    assert [(c.kind, c.db, c.table, c.after) for c in changes] == \
        [("drop", DB, "a", None), ("drop", "other", "b", None)]
    assert apply_ddl(cat, "DROP TEMPORARY TABLE IF EXISTS a", DB) == []
    assert targets("DROP TABLE IF EXISTS a, other.b", DB) == {(DB, "a"), ("other", "b")}


def test_truncate():
    cat = catalog("CREATE TABLE a (x INT)")
    for sql in ("TRUNCATE a", "TRUNCATE TABLE app.a", "TRUNCATE TABLE a WAIT 2"):
        [change] = apply_ddl(cat, sql, DB)
        assert change == TableChange("truncate", DB, "a", cat.tables[(DB, "a")],
                                     cat.tables[(DB, "a")])
    assert unsupported(cat, "TRUNCATE nothere").tables == {(DB, "nothere")}


# --------------------------------------------------------------------------- databases

def test_create_alter_drop_database():
    cat = catalog("CREATE DATABASE d1 CHARACTER SET latin1", "CREATE SCHEMA d2",
                  "CREATE DATABASE IF NOT EXISTS d3 DEFAULT COLLATE utf8mb4_bin",
                  "CREATE TABLE d1.t (v VARCHAR(3))", "CREATE TABLE d1.u (v INT)")
    assert (cat.databases["d1"], cat.databases["d2"], cat.databases["d3"]) == \
        ("latin1", "utf8mb4", "utf8mb4")
    assert cols(cat, "t", "d1")["v"].charset == "latin1"
    cat.execute("ALTER DATABASE d1 DEFAULT CHARACTER SET = utf8mb4", DB)
    cat.execute("CREATE TABLE d1.w (v VARCHAR(3))", DB)
    assert cols(cat, "w", "d1")["v"].charset == "utf8mb4"
    assert classify("DROP DATABASE d1") == "database"
    assert targets("DROP DATABASE d1", DB, cat) == {("d1", "t"), ("d1", "u"), ("d1", "w")}
    changes = cat.execute("DROP DATABASE d1", DB)
    assert sorted(c.table for c in changes) == ["t", "u", "w"] and {c.kind for c in changes} == {"drop"}
    assert "d1" not in cat.databases and not any(k[0] == "d1" for k in cat.tables)


def test_unknown_database_charset_only_matters_for_string_columns():
    cat = Catalog(explicit_defaults_for_timestamp=True)
    cat.execute("CREATE TABLE x.t (a INT)", None)
    assert cat.tables[("x", "t")].charset is None
    assert unsupported(cat, "CREATE TABLE x.u (a VARCHAR(3))").tables == {("x", "u")}
    cat.execute("CREATE TABLE x.v (a VARCHAR(3)) CHARSET latin1", None)


# --------------------------------------------------------------------------- classify / targets / errors

@pytest.mark.parametrize("sql,kind", [
    ("CREATE TABLE t (a INT)", "ddl"), ("create or replace temporary table t (a int)", "ddl"),
    ("ALTER ONLINE IGNORE TABLE t ADD a INT", "ddl"), ("RENAME TABLES a TO b", "ddl"),
    ("DROP TEMPORARY TABLE t", "ddl"), ("TRUNCATE t", "ddl"), ("CREATE SEQUENCE s", "ddl"),
    ("DROP INDEX `PRIMARY` ON t", "ddl"), ("DROP INDEX i ON t", "ignore"),
    ("CREATE UNIQUE INDEX i ON t (a)", "ignore"), ("CREATE DATABASE d", "database"),
    ("DROP SCHEMA IF EXISTS d", "database"), ("ALTER DATABASE d CHARSET latin1", "database"),
    ("CREATE OR REPLACE DATABASE d", "database"), ("GRANT SELECT ON *.* TO u", "ignore"),
    ("CREATE USER u", "ignore"), ("SET @a = 1", "ignore"), ("FLUSH TABLES", "ignore"),
    ("ANALYZE TABLE t", "ignore"), ("CREATE DEFINER=`root`@`%` VIEW v AS SELECT 1", "ignore"),
    ("DROP VIEW v", "ignore"), ("CREATE TRIGGER tr BEFORE INSERT ON t FOR EACH ROW SET @a=1", "ignore"),
    ("DROP PROCEDURE p", "ignore"), ("CREATE EVENT e ON SCHEDULE EVERY 1 DAY DO SELECT 1", "ignore"),
    ("SAVEPOINT s", "ignore"), ("BEGIN", "ignore"), ("COMMIT", "ignore"), ("XA START 'x'", "ignore"),
    ("/*!40101 SET NAMES utf8mb4 */", "ignore"), ("/* c */ ALTER TABLE t FORCE", "ddl"),
    ("INSERT INTO t VALUES (1)", "ignore"), ("RENAME USER a TO b", "ignore"), ("", "ignore"),
    ("ALTER SEQUENCE s RESTART 1", "ignore"),
])
def test_classify(sql, kind):
    assert classify(sql) == kind


def test_targets_work_where_parsing_does_not():
    assert targets("ALTER TABLE `a b`.c ADD COLUMN x FROBNICATE(3)", DB) == {("a b", "c")}
    assert targets("CREATE TABLE IF NOT EXISTS t AS SELECT 1", DB) == {(DB, "t")}
    assert targets("GRANT ALL ON *.* TO u", DB) == set()
    assert targets("ALTER TABLE t ADD x INT", None) is None
    assert targets("ALTER TABLE 'unterminated", DB) is None


@pytest.mark.parametrize("sql", [
    "ALTER TABLE t ADD COLUMN x FROBNICATE(3)",
    "ALTER TABLE t WITH SYSTEM VERSIONING",
    "ALTER TABLE t CONVERT PARTITION p TO TABLE u",
    "ALTER TABLE t ADD x INT WITH SYSTEM VERSIONING",
    "ALTER TABLE t ADD x INT MYSTERY",
    "ALTER TABLE t CONVERT TO CHARACTER SET binary",
    "ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4, ADD x VARCHAR(3)",
    "ALTER TABLE t ADD x VARCHAR(3) CHARSET klingon",
    "ALTER TABLE t ADD x VARCHAR(3) COLLATE uca1400_ai_ci",
    "ALTER TABLE t DROP COLUMN a, MODIFY a BIGINT",
    "ALTER TABLE t ADD PRIMARY KEY ((a + 1))",
    "ALTER TABLE t ADD x INT; DROP TABLE t",
    "ALTER TABLE t ADD x INT /* unterminated",
    "ALTER TABLE nothere ADD x INT",
])
def test_not_understood_raises_with_the_tables(sql):
    cat = catalog("CREATE TABLE t (a INT, b TEXT)")
    err = unsupported(cat, sql)
    assert isinstance(err, SchemaError) and err.code == "DDL_UNSUPPORTED" and err.hint
    assert err.sql == sql
    if "unterminated" not in sql and "nothere" not in sql and ";" not in sql:
        assert err.tables == {(DB, "t")}, sql
    assert cat.tables[(DB, "t")].column_names == ("a", "b")  # never mutated
    again = pickle.loads(pickle.dumps(err))
    assert (again.tables, again.sql, again.code) == (err.tables, err.sql, err.code)


def test_apply_ddl_never_mutates_and_copy_is_independent():
    cat = catalog(BASE)
    snapshot = cat.copy()
    changes = apply_ddl(cat, "ALTER TABLE t DROP a", DB)
    assert cat.tables == snapshot.tables
    snapshot.apply(changes)
    assert names(snapshot, "t") == ("b", "c") and names(cat, "t") == ("a", "b", "c")


def test_sql_mode_variants():
    cat = catalog()
    [c] = apply_ddl(cat, 'CREATE TABLE "q" ("a" REAL)', DB, sql_mode="ANSI_QUOTES,REAL_AS_FLOAT")
    assert c.table == "q" and c.after.columns[0].name == "a" and c.after.columns[0].data_type == "float"
    with pytest.raises(UnsupportedDdlError):
        apply_ddl(cat, "CREATE TABLE t (a VARCHAR2(3))", DB, sql_mode="ORACLE")


def test_lower_case_table_names():
    cat = Catalog(databases={"app": "utf8mb4"}, explicit_defaults_for_timestamp=True,
                  lower_case_table_names=1)
    cat.execute("CREATE TABLE App.MyTable (a INT)", "App")
    assert ("app", "mytable") in cat.tables
    assert isinstance(cat.tables[("app", "mytable")], TableDef)


@pytest.mark.parametrize("sql, target", [
    ("INSERT INTO t VALUES (1)", (DB, "t")),
    ("/* app */ insert low_priority ignore into `o`.`t` (a) values (1)", ("o", "t")),
    ("REPLACE o.t SET a = 1", ("o", "t")),
    ("UPDATE IGNORE t SET a = 1", (DB, "t")),
    ("UPDATE t1 JOIN t2 ON t1.a = t2.a SET t1.b = 1", (DB, "t1")),
    ("DELETE FROM o.t WHERE a = 1", ("o", "t")),
    ("DELETE QUICK t1 FROM t1 JOIN t2 ON 1", (DB, "t1")),
    ("LOAD DATA LOCAL INFILE '/tmp/f' REPLACE INTO TABLE o.t", ("o", "t")),
    ("BEGIN", None), ("COMMIT", None), ("CREATE TABLE t (a INT)", None),
    ("INSERT INTO", None),
])
def test_the_target_of_a_statement_that_changes_rows(sql, target):
    """What a QUERY event carrying a change logged as a statement writes to first."""
    from mysqlcdc.schema.ddl import dml_target

    assert dml_target(sql, DB) == target


def test_alter_names_the_columns_it_filled_in_existing_rows():
    """``TableChange.filled``: the columns whose values in existing rows no row event
    carries (DESIGN.md decision 33: the table is read again)."""
    cat = catalog("CREATE TABLE f (id INT PRIMARY KEY, v INT, n INT)")
    filled = lambda sql: [c.filled for c in cat.execute(sql, DB)]   # noqa: E731
    assert filled("ALTER TABLE f ADD COLUMN a INT") == [()]
    assert filled("ALTER TABLE f ADD COLUMN b INT DEFAULT NULL, ADD c TEXT NULL") == [()]
    assert filled("ALTER TABLE f ADD COLUMN d INT DEFAULT 3") == [("d",)]
    assert filled("ALTER TABLE f ADD COLUMN e INT NOT NULL") == [("e",)]
    assert filled("ALTER TABLE f ADD COLUMN g INT AS (v + 1)") == [("g",)]
    assert filled("ALTER TABLE f ADD (h INT DEFAULT 1, i INT), ADD j TIMESTAMP(3) "
                  "DEFAULT CURRENT_TIMESTAMP(3)") == [("h", "j")]
    assert filled("ALTER TABLE f ADD COLUMN k BIGINT UNSIGNED AUTO_INCREMENT UNIQUE") == [("k",)]
    assert filled("ALTER TABLE f MODIFY n INT NOT NULL") == [("n",)]
    assert filled("ALTER TABLE f MODIFY v BIGINT, ALTER COLUMN d SET DEFAULT 4") == [()]
    assert filled("ALTER TABLE f CHANGE a a2 VARCHAR(5) NOT NULL DEFAULT 'x'") == [("a2",)]
    assert filled("ALTER TABLE f ADD COLUMN IF NOT EXISTS d INT DEFAULT 9") == [()]
