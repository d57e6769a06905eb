"""Apply one DDL statement, as the server wrote it into the binlog, to a catalog.

The schema history advances a :class:`Catalog` (every table's columns, the
databases' default character sets and the few server settings that decide a
column's type) by the DDL in QUERY events. ``apply_ddl`` returns what one
statement does as :class:`TableChange` values and never mutates the catalog;
``Catalog.apply`` / ``Catalog.apply_database`` (or ``Catalog.execute`` for both)
advance it.

Certainty over coverage: whatever is not understood exactly raises
:class:`~mysqlcdc.errors.UnsupportedDdlError` carrying the tables the statement
touches, so that the caller can stop those tables instead of decoding rows with
wrong columns.

Lexing uses sqlglot's MySQL tokenizer (quoting, escapes, comments). The grammar
is a small parser of its own: sqlglot's MySQL dialect maps several types
differently from the server (``INT8`` to TINYINT, ``LONG`` to BIGINT, ``REAL``
to FLOAT, where the server has BIGINT, MEDIUMTEXT and DOUBLE), rejects
MariaDB's ``PERSISTENT``, ``MIDDLEINT``, ``NATIONAL VARCHAR`` and ``INET6``, and
falls back to an opaque command for ``ALTER ONLINE``, ``WAIT n``,
``CONVERT TO CHARACTER SET``, ``RENAME TABLE`` and ``ADD COLUMN (...)``, all of
which servers log.

Rules taken from the server (checked by tests/integration/test_ddl_differential.py):
a column without a character set takes the table's default *after* the
statement (also for MODIFY/CHANGE, which do not keep the old one); CONVERT TO
CHARACTER SET promotes TEXT types so that they hold as many characters as
before; ``TEXT(n)`` picks the smallest TEXT type for n characters; ENUM/SET
labels lose trailing spaces; AUTO_INCREMENT and PRIMARY KEY columns are NOT
NULL; ``ADD COLUMN IF NOT EXISTS`` and ``DROP COLUMN IF EXISTS`` look at the
table as it was before the statement; columns changed without FIRST/AFTER stay
in place, then added and repositioned ones are placed in statement order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from mysqlcdc.errors import UnsupportedDdlError
from mysqlcdc.schema.model import SYSTEM_PERIOD, ColumnDef, TableDef, with_system_period

__all__ = ["Catalog", "TableChange", "UnsupportedDdlError", "apply_ddl", "classify", "dml_target",
           "targets"]

_VERSIONING = ("DROP SYSTEM VERSIONING of a table whose period columns are named (what becomes "
               "of them is not certain: re-read the table's definition from the server)")

Key = tuple[str, str]


# --------------------------------------------------------------------------- catalog

@dataclass(frozen=True)
class TableChange:
    """What one statement did to one table.

    ``db``/``table`` name the table after the statement (for a rename the new
    name, with ``old`` the previous one). ``after`` is None for a drop and equal to
    ``before`` for a truncate; ``before`` is None for a table that did not exist.
    """

    kind: str            # "create" | "alter" | "drop" | "rename" | "truncate"
    db: str
    table: str
    before: TableDef | None
    after: TableDef | None
    old: Key | None = None
    # alter: columns the statement gave a value in rows that already existed (an added
    # column that is NOT NULL, has a non-NULL DEFAULT, AUTO_INCREMENT or an expression;
    # a column made NOT NULL). No row event carries those values.
    filled: tuple[str, ...] = ()


@dataclass
class Catalog:
    """Table definitions plus what decides the columns of new ones.

    ``explicit_defaults_for_timestamp`` decides whether a TIMESTAMP column that
    says neither NULL nor NOT NULL is nullable; None means unknown, and such a
    column then raises. ``utf8_name`` is what the server calls ``utf8``
    (``utf8mb3`` on current servers). ``lower_case_table_names`` = 1 folds
    database and table names to lower case as the server does.

    A table missing from ``tables`` is taken not to exist where that decides the
    outcome (CREATE TABLE IF NOT EXISTS creates it, DROP TABLE of it changes
    nothing); ALTER, TRUNCATE, RENAME and CREATE ... LIKE of a missing table raise.
    """

    tables: dict[Key, TableDef] = field(default_factory=dict)
    databases: dict[str, str | None] = field(default_factory=dict)
    server_charset: str = "utf8mb4"
    explicit_defaults_for_timestamp: bool | None = None
    utf8_name: str = "utf8mb3"
    lower_case_table_names: int = 0

    def copy(self) -> "Catalog":
        return replace(self, tables=dict(self.tables), databases=dict(self.databases))

    def apply(self, changes: list[TableChange]) -> None:
        """Advance the tables by ``changes`` (in order), in place."""
        for change in changes:
            key = (change.db, change.table)
            if change.kind == "drop":
                self.tables.pop(key, None)
            elif change.kind == "rename":
                if change.old is not None:
                    self.tables.pop(change.old, None)
                self.tables[key] = change.after
            elif change.kind in ("create", "alter", "truncate"):
                self.tables[key] = change.after
            else:
                raise ValueError(f"unknown table change kind {change.kind!r}")

    def apply_database(self, sql: str, default_db: str | None) -> None:
        """Advance ``databases`` by CREATE/ALTER/DROP DATABASE, in place.

        DROP DATABASE (and CREATE OR REPLACE DATABASE) also forget the database's
        tables; ``apply_ddl`` returns a "drop" change for each of them first.
        """
        try:
            op = _Parser(self, sql, default_db).database_statement()
        except _Unsupported as e:
            raise UnsupportedDdlError(str(e), tables=targets(sql, default_db, self),
                                      sql=sql) from None
        if op is None:
            return
        verb, name, charset = op
        if verb == "drop" or verb == "replace":
            for key in [k for k in self.tables if k[0] == name]:
                del self.tables[key]
            self.databases.pop(name, None)
        if verb in ("create", "replace"):
            self.databases[name] = charset or self.server_charset
        elif verb == "alter" and charset is not None:
            self.databases[name] = charset

    def execute(self, sql: str, default_db: str | None) -> list[TableChange]:
        """classify + apply_ddl + apply (+ apply_database): one call per QUERY event."""
        kind = classify(sql)
        if kind == "ignore":
            return []
        changes = apply_ddl(self, sql, default_db)
        self.apply(changes)
        if kind == "database":
            self.apply_database(sql, default_db)
        return changes

    @classmethod
    def from_server(cls, conn, include=None) -> "Catalog":
        """Bootstrap from information_schema (see mysqlcdc.schema.introspect)."""
        from mysqlcdc.schema.introspect import load_databases, load_server_settings, load_tables

        settings = load_server_settings(conn)
        return cls(tables=load_tables(conn, include), databases=load_databases(conn), **settings)


# --------------------------------------------------------------------------- entry points

_DATABASE_WORDS = ("DATABASE", "SCHEMA")


_DDL_VERBS = frozenset({"CREATE", "ALTER", "DROP", "RENAME", "TRUNCATE", "IMPORT"})
_LEADING_COMMENTS = re.compile(r"(?:\s+|/\*(?!!|M!).*?\*/|--[ \t][^\n]*|#[^\n]*)*", re.S)
_FIRST_WORD = re.compile(r"[A-Za-z]+")


def classify(sql: str) -> str:
    """"ddl" (may change table definitions), "database" or "ignore".

    Cheap for the statements most QUERY events carry (BEGIN, COMMIT, DML in
    statement format): only a statement that starts with a DDL verb, or with a
    versioned comment, is tokenized.
    """
    rest = sql[_LEADING_COMMENTS.match(sql).end():]
    if not rest.startswith("/*"):
        first = _FIRST_WORD.match(rest)
        if first is None or first.group(0).upper() not in _DDL_VERBS:
            return "ignore"
    try:
        words = _lead(_tokenize(sql))
    except _Unsupported:
        first = re.match(r"\s*([A-Za-z]+)", _strip_comments_roughly(sql))
        verb = first.group(1).upper() if first else ""
        return "ddl" if verb in _DDL_VERBS else "ignore"
    return _classify_words(words)


def _classify_words(words: list[str]) -> str:
    if not words:
        return "ignore"
    verb, rest = words[0], words[1:]
    if verb == "CREATE":
        rest = _skip_words(rest, ("OR", "REPLACE"))
        if rest[:1] and rest[0] in _DATABASE_WORDS:
            return "database"
        rest = _skip_words(rest, ("TEMPORARY",))
        return "ddl" if rest[:1] in (["TABLE"], ["SEQUENCE"]) else "ignore"
    if verb == "ALTER":
        if rest[:1] and rest[0] in _DATABASE_WORDS:
            return "database"
        while rest[:1] and rest[0] in ("ONLINE", "IGNORE"):
            rest = rest[1:]
        return "ddl" if rest[:1] == ["TABLE"] else "ignore"
    if verb == "DROP":
        if rest[:1] and rest[0] in _DATABASE_WORDS:
            return "database"
        rest = _skip_words(rest, ("TEMPORARY",))
        if rest[:1] and rest[0] in ("TABLE", "TABLES", "SEQUENCE"):
            return "ddl"
        rest = _skip_words(rest, ("INDEX",))
        rest = _skip_words(rest, ("IF", "EXISTS"))
        if rest[:1] and rest[0] in ("PRIMARY", "`PRIMARY"):
            return "ddl"
        return "ignore"
    if verb == "RENAME":
        return "ddl" if rest[:1] and rest[0] in ("TABLE", "TABLES") else "ignore"
    if verb in ("TRUNCATE", "IMPORT"):
        return "ddl"
    return "ignore"


def _lead(toks: list["_Tok"]) -> list[str]:
    """The first words of a statement, upper-cased; quoted names get a leading backquote."""
    return [t.up if t.kind != "ident" else "`" + t.text.upper() for t in toks[:8]]


def _skip_words(words: list[str], seq: tuple[str, ...]) -> list[str]:
    return words[len(seq):] if tuple(words[:len(seq)]) == seq else words


def targets(sql: str, default_db: str | None, catalog: Catalog | None = None) -> set[Key] | None:
    """The (db, table) pairs ``sql`` creates, changes, renames or drops; None if unknown.

    Reads only the statement's names, so it works where full parsing fails.
    Statements that touch no table give an empty set; DROP DATABASE gives the
    database's tables when ``catalog`` is given.
    """
    try:
        return _Parser(catalog or Catalog(), sql, default_db).targets()
    except _Unsupported:
        return None


_DML_VERBS = frozenset({"INSERT", "REPLACE", "UPDATE", "DELETE", "LOAD"})
_DML_WORD = re.compile(r"\s*([A-Za-z]+)")


def dml_target(sql: str, default_db: str | None) -> Key | None:
    """The table a data-changing statement (INSERT, REPLACE, UPDATE, DELETE, LOAD DATA)
    writes to first, for a QUERY event that carries one; None for any other statement or
    one whose target cannot be read. Cheap for the statements most QUERY events hold
    (BEGIN, COMMIT, DDL): only the first word is looked at."""
    rest = sql[_LEADING_COMMENTS.match(sql).end():]
    first = _DML_WORD.match(rest)
    if first is None or first.group(1).upper() not in _DML_VERBS:
        return None
    try:
        return _Parser(Catalog(), rest, default_db).dml_target()
    except (_Unsupported, IndexError, AttributeError):
        return None


def apply_ddl(catalog: Catalog, sql: str, default_db: str | None, *,
              sql_mode: str = "") -> list[TableChange]:
    """What ``sql`` does to the tables of ``catalog`` (which is not changed).

    ``sql_mode`` is the session's mode when known: ANSI_QUOTES, REAL_AS_FLOAT and
    NO_BACKSLASH_ESCAPES change how a statement reads; ORACLE mode is refused.
    """
    try:
        return _Parser(catalog, sql, default_db, sql_mode=sql_mode).statement()
    except _Unsupported as e:
        raise UnsupportedDdlError(
            f"cannot apply DDL: {e}: {_short(sql)}",
            tables=targets(sql, default_db, catalog), sql=sql) from None


def _short(sql: str, limit: int = 300) -> str:
    text = " ".join(sql.split())
    return text if len(text) <= limit else text[:limit] + "..."


# --------------------------------------------------------------------------- lexing

class _Unsupported(Exception):
    """Internal: the statement is not understood with certainty."""


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str     # "word" | "ident" | "string" | "number" | "hex" | "bit" | "op"
    text: str     # identifier or string value, word or operator as written
    up: str       # upper-case text for words and operators, "" for identifiers and strings


_WORD = re.compile(r"[A-Za-z0-9_$\u0080-\uffff]+\Z")


def _expand_versioned(sql: str) -> str:
    """Replace ``/*!NNNNN text */`` and ``/*M!NNNNNN text */`` by ``text``.

    Servers execute the text of versioned comments (every version that appears in
    practice is older than the servers that write binlogs this tool reads).
    """
    if "/*" not in sql or "!" not in sql:
        return sql
    out: list[str] = []
    i, n, inside = 0, len(sql), False
    while i < n:
        ch = sql[i]
        if ch in "'\"`":
            j = i + 1
            while j < n:
                if sql[j] == "\\" and ch != "`":
                    j += 2
                    continue
                if sql[j] == ch:
                    if j + 1 < n and sql[j + 1] == ch:
                        j += 2
                        continue
                    break
                j += 1
            out.append(sql[i:j + 1])
            i = j + 1
        elif sql.startswith("/*!", i) or sql.startswith("/*M!", i):
            if inside:
                raise _Unsupported("nested versioned comment")
            j = i + (3 if sql[i + 2] == "!" else 4)
            k = j
            while k < n and sql[k].isdigit():
                k += 1
            if k - j not in (0, 5, 6):
                raise _Unsupported("versioned comment with an unreadable version")
            out.append(" ")
            i, inside = k, True
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            if j < 0:
                raise _Unsupported("unterminated comment")
            out.append(sql[i:j + 2])
            i = j + 2
        elif inside and sql.startswith("*/", i):
            out.append(" ")
            i, inside = i + 2, False
        elif ch == "#" or (sql.startswith("--", i) and (i + 2 >= n or sql[i + 2] in " \t\r\n")):
            j = sql.find("\n", i)
            j = n if j < 0 else j
            out.append(sql[i:j])
            i = j
        else:
            out.append(ch)
            i += 1
    if inside:
        raise _Unsupported("unterminated versioned comment")
    return "".join(out)


def _strip_comments_roughly(sql: str) -> str:
    return re.sub(r"/\*(?![!M]).*?\*/|--[ \t][^\n]*|#[^\n]*", " ", sql, flags=re.S)


_LEXER = None


def _lexer():
    """sqlglot's MySQL tokenizer, minus its habit of swallowing the rest of a statement
    after RENAME/REPLACE/... into one opaque string."""
    global _LEXER
    if _LEXER is None:
        from sqlglot.dialects.mysql import MySQL

        class Lexer(MySQL.tokenizer_class):
            COMMANDS: set = set()

        _LEXER = (Lexer, MySQL())
    lexer, dialect = _LEXER
    return lexer(dialect=dialect)  # the dialect supplies the backslash escapes


def _tokenize(sql: str, *, ansi_quotes: bool = False) -> list[_Tok]:
    from sqlglot.tokens import TokenType

    text = _expand_versioned(sql)
    try:
        raw = _lexer().tokenize(text)
    except Exception as e:  # sqlglot raises TokenError and, on odd input, others
        raise _Unsupported(f"cannot tokenize ({e.__class__.__name__})") from None
    toks: list[_Tok] = []
    for t in raw:
        tt = t.token_type
        if tt == TokenType.IDENTIFIER:
            toks.append(_Tok("ident", t.text, ""))
        elif tt in (TokenType.STRING, TokenType.NATIONAL_STRING):
            double = text[t.start:t.start + 1] == '"'
            if double and ansi_quotes:
                toks.append(_Tok("ident", t.text, ""))
            else:
                toks.append(_Tok("string", t.text, ""))
        elif tt == TokenType.INTRODUCER:
            continue  # _latin1'x': the value is the string that follows
        elif tt == TokenType.HEX_STRING:
            toks.append(_Tok("hex", t.text, ""))
        elif tt == TokenType.BIT_STRING:
            toks.append(_Tok("bit", t.text, ""))
        elif tt == TokenType.NUMBER:
            toks.append(_Tok("number", t.text, t.text))
        elif _WORD.match(t.text):
            toks.append(_Tok("word", t.text, t.text.upper()))
        elif all(_WORD.match(part) for part in t.text.split()):
            # sqlglot fuses some keyword pairs ("PRIMARY KEY", "ORDER BY"): split them again
            toks.extend(_Tok("word", part, part.upper()) for part in t.text.split())
        else:
            toks.append(_Tok("op", t.text, t.text.upper()))
    while toks and toks[-1].up == ";":
        toks.pop()
    if any(t.up == ";" for t in toks):
        raise _Unsupported("more than one statement")
    return toks


# --------------------------------------------------------------------------- charsets

_MBMAXLEN = {
    "big5": 2, "dec8": 1, "cp850": 1, "hp8": 1, "koi8r": 1, "latin1": 1, "latin2": 1,
    "swe7": 1, "ascii": 1, "ujis": 3, "sjis": 2, "hebrew": 1, "tis620": 1, "euckr": 2,
    "koi8u": 1, "gb2312": 2, "greek": 1, "cp1250": 1, "gbk": 2, "latin5": 1, "armscii8": 1,
    "utf8mb3": 3, "ucs2": 2, "cp866": 1, "keybcs2": 1, "macce": 1, "macroman": 1, "cp852": 1,
    "latin7": 1, "utf8mb4": 4, "cp1251": 1, "utf16": 4, "utf16le": 4, "cp1256": 1,
    "cp1257": 1, "utf32": 4, "binary": 1, "geostd8": 1, "cp932": 2, "eucjpms": 3,
    "gb18030": 4,
}
_BY_LENGTH = sorted(_MBMAXLEN, key=len, reverse=True)


# --------------------------------------------------------------------------- types

_INT_TYPES = {  # spelling -> (data_type, signed display width, unsigned display width)
    "TINYINT": ("tinyint", 4, 3), "INT1": ("tinyint", 4, 3),
    "SMALLINT": ("smallint", 6, 5), "INT2": ("smallint", 6, 5),
    "MEDIUMINT": ("mediumint", 9, 8), "MIDDLEINT": ("mediumint", 9, 8), "INT3": ("mediumint", 9, 8),
    "INT": ("int", 11, 10), "INTEGER": ("int", 11, 10), "INT4": ("int", 11, 10),
    "BIGINT": ("bigint", 20, 20), "INT8": ("bigint", 20, 20),
}
_TEXT_SIZES = (("tinytext", 255), ("text", 65535), ("mediumtext", 16777215), ("longtext", None))
_BLOB_SIZES = (("tinyblob", 255), ("blob", 65535), ("mediumblob", 16777215), ("longblob", None))
_TEXT_TYPES = {name for name, _ in _TEXT_SIZES}
_BLOB_TYPES = {name for name, _ in _BLOB_SIZES}
_TEXT_BYTES = {name: size if size else 4294967295 for name, size in _TEXT_SIZES}
_SIMPLE_TYPES = {  # spelling -> data_type for types without arguments or charset
    "DATE": "date", "GEOMETRY": "geometry", "POINT": "point", "LINESTRING": "linestring",
    "POLYGON": "polygon", "MULTIPOINT": "multipoint", "MULTILINESTRING": "multilinestring",
    "MULTIPOLYGON": "multipolygon", "GEOMETRYCOLLECTION": "geometrycollection",
    "INET4": "inet4", "INET6": "inet6", "UUID": "uuid",
}


@dataclass
class _Type:
    data_type: str
    column_type: str = ""          # final COLUMN_TYPE for non-string types
    unsigned: bool = False
    zerofill: bool = False
    string: bool = False           # takes a character set (char, varchar, text, enum, set)
    charset: str | None = None     # explicit (resolved) character set
    collate_charset: str | None = None
    length: int | None = None
    text_chars: int | None = None  # TEXT(n)
    labels: tuple[str, ...] = ()
    precision: int | None = None
    scale: int | None = None
    fsp: int | None = None
    serial: bool = False


@dataclass
class _ColSpec:
    name: str
    type: _Type
    null: bool | None = None       # explicit NULL / NOT NULL
    primary: bool = False
    auto_increment: bool = False
    invisible: bool | None = None
    generated: bool = False
    collate_charset: str | None = None
    has_default_null: bool = False
    has_default_value: bool = False   # a DEFAULT other than NULL
    system: str | None = None      # GENERATED ALWAYS AS ROW START / END: "row_start"/"row_end"


# --------------------------------------------------------------------------- parser

_SEQUENCE_COLUMNS = ("next_not_cached_value", "minimum_value", "maximum_value", "start_value",
                     "increment", "cache_size", "cycle_option", "cycle_count")
_INDEX_WORDS = {"INDEX", "KEY", "UNIQUE", "FULLTEXT", "SPATIAL", "FOREIGN", "CHECK", "CONSTRAINT",
                "PRIMARY"}
_SKIP_DANGER = {"CHARACTER", "CHARSET", "COLLATE", "CONVERT", "CHANGE", "MODIFY", "RENAME",
                "ALTER", "ADD", "DROP", "FIRST", "AFTER", "VERSIONING"}
_TABLE_OPTIONS = {
    "ENGINE", "TYPE", "AUTO_INCREMENT", "AVG_ROW_LENGTH", "CHECKSUM", "TABLE_CHECKSUM",
    "COMMENT", "CONNECTION", "DELAY_KEY_WRITE", "ENCRYPTED", "ENCRYPTION", "ENCRYPTION_KEY_ID",
    "IETF_QUOTES", "INSERT_METHOD", "KEY_BLOCK_SIZE", "MAX_ROWS", "MIN_ROWS", "PACK_KEYS",
    "PAGE_CHECKSUM", "PAGE_COMPRESSED", "PAGE_COMPRESSION_LEVEL", "PASSWORD", "ROW_FORMAT",
    "SEQUENCE", "STATS_AUTO_RECALC", "STATS_PERSISTENT", "STATS_SAMPLE_PAGES", "TRANSACTIONAL",
    "UNION", "COMPRESSION", "AUTOEXTEND_SIZE", "ENGINE_ATTRIBUTE", "SECONDARY_ENGINE_ATTRIBUTE",
    "SECONDARY_ENGINE",
}
_PARTITION_OPS = {"COALESCE", "REORGANIZE", "EXCHANGE", "ANALYZE", "CHECK", "OPTIMIZE",
                  "REBUILD", "REPAIR", "TRUNCATE", "DISCARD", "IMPORT"}


@dataclass
class _Alter:
    """The column-level operations of one ALTER TABLE, in statement order."""

    defs: list = field(default_factory=list)   # ("add"|"change", old, spec, position, if_flag)
    drops: list = field(default_factory=list)  # (name, if_exists)
    renames: list = field(default_factory=list)  # (old, new, if_exists)
    visibility: list = field(default_factory=list)  # (name, invisible, if_exists)
    drop_pk: bool = False
    add_pk: list[str] | None = None
    charset: str | None = None
    convert: str | None = None
    rename_to: Key | None = None
    versioning: str | None = None   # "add" | "drop": ADD / DROP SYSTEM VERSIONING
    filled: tuple[str, ...] = ()    # set by run_alter: see TableChange.filled


class _Parser:
    def __init__(self, catalog: Catalog, sql: str, default_db: str | None, *,
                 sql_mode: str = "") -> None:
        mode = {m.strip().upper() for m in sql_mode.split(",") if m.strip()}
        if "ORACLE" in mode:
            raise _Unsupported("sql_mode ORACLE changes type names")
        if "NO_BACKSLASH_ESCAPES" in mode and "\\" in sql:
            raise _Unsupported("backslashes under NO_BACKSLASH_ESCAPES")
        self.real_as_float = "REAL_AS_FLOAT" in mode
        self.versioned = False            # CREATE TABLE ... WITH SYSTEM VERSIONING
        self.cat = catalog
        self.sql = sql
        self.default_db = default_db
        self.toks = _tokenize(sql, ansi_quotes="ANSI_QUOTES" in mode or "ANSI" in mode)
        self.i = 0

    # ----- token helpers
    def peek(self, k: int = 0) -> _Tok | None:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def at(self, *words: str) -> bool:
        for k, w in enumerate(words):
            t = self.peek(k)
            if t is None or t.up != w:
                return False
        return True

    def at_any(self, words) -> bool:
        t = self.peek()
        return t is not None and t.up in words

    def accept(self, *words: str) -> bool:
        if self.at(*words):
            self.i += len(words)
            return True
        return False

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            self.fail(f"expected {' '.join(words)}")

    def done(self) -> bool:
        return self.i >= len(self.toks)

    def fail(self, what: str, *, near: bool = True):
        if not near:
            raise _Unsupported(what)
        t = self.peek()
        near = "end of statement" if t is None else repr(t.text)
        raise _Unsupported(f"{what} near {near}")

    def next(self) -> _Tok:
        t = self.peek()
        if t is None:
            self.fail("unexpected end")
        self.i += 1
        return t

    def ident(self) -> str:
        t = self.peek()
        if t is None or t.kind not in ("word", "ident"):
            self.fail("expected a name")
        self.i += 1
        return t.text

    def number(self) -> int:
        t = self.next()
        if t.kind != "number" or not t.text.isdigit():
            self.i -= 1
            self.fail("expected a whole number")
        return int(t.text)

    def string(self) -> str:
        t = self.peek()
        if t is None or t.kind != "string":
            self.fail("expected a string")
        parts = []
        while self.peek() is not None and self.peek().kind == "string":
            parts.append(self.next().text)
        return "".join(parts)

    def skip_parens(self) -> None:
        self.expect("(")
        depth = 1
        while depth:
            t = self.next()
            if t.kind == "op":
                if t.up == "(":
                    depth += 1
                elif t.up == ")":
                    depth -= 1

    def skip_item(self, closers=(",",), danger: bool = True) -> None:
        """Skip to the next top-level comma (or closing paren, or end)."""
        while not self.done():
            t = self.peek()
            if t.kind == "op" and (t.up in closers or t.up == ")"):
                return
            if t.up == "(":
                self.skip_parens()
                continue
            if danger and t.kind == "word" and t.up in _SKIP_DANGER:
                self.fail("clause not understood")
            self.i += 1

    def skip_to_end(self) -> None:
        while not self.done():
            if self.at("("):
                self.skip_parens()
            else:
                self.i += 1

    def order_by_list(self) -> None:
        """``ORDER BY a [ASC], b ...``: the list ends where a comma starts another clause."""
        while True:
            self.ident()
            self.accept("ASC") or self.accept("DESC")
            after = self.peek(2)
            if self.at(",") and self.peek(1) is not None \
                    and self.peek(1).kind in ("word", "ident") \
                    and (after is None or after.up in (",", "ASC", "DESC")):
                self.i += 1
                continue
            return

    def skip_wait(self) -> None:
        if self.accept("WAIT"):
            self.number()
        else:
            self.accept("NOWAIT")

    def table_name(self) -> Key:
        first = self.ident()
        if self.accept("."):
            db, name = first, self.ident()
        else:
            if self.default_db is None:
                self.fail(f"table {first!r} without a database and no default database", near=False)
            db, name = self.default_db, first
        if self.cat.lower_case_table_names:
            db, name = db.lower(), name.lower()
        return db, name

    def db_name(self) -> str:
        name = self.ident()
        return name.lower() if self.cat.lower_case_table_names else name

    # ----- charsets
    def charset_name(self, name: str) -> str:
        low = name.lower()
        if low == "utf8":
            return self.cat.utf8_name
        if low == "default":
            self.fail("CHARACTER SET DEFAULT")
        if low not in _MBMAXLEN:
            self.fail(f"unknown character set {name!r}")
        return low

    def collation_charset(self, name: str) -> str:
        low = name.lower()
        if low == "binary":
            return "binary"
        if low.startswith("utf8_"):
            return self.cat.utf8_name
        for cs in _BY_LENGTH:
            if low.startswith(cs + "_"):
                return cs
        self.fail(f"collation {name!r} of unknown character set")

    def mbmaxlen(self, charset: str) -> int:
        return _MBMAXLEN.get(charset, 3 if charset == "utf8" else 0) or self.fail(
            f"unknown character set {charset!r}")

    def charset_value(self) -> str:
        self.accept("=")
        t = self.next()
        if t.kind not in ("word", "ident", "string"):
            self.i -= 1
            self.fail("expected a character set")
        if t.up == "DEFAULT":
            self.fail("CHARACTER SET DEFAULT")
        return self.charset_name(t.text)

    def collate_value(self) -> str:
        self.accept("=")
        t = self.next()
        if t.kind not in ("word", "ident", "string"):
            self.i -= 1
            self.fail("expected a collation")
        if t.up == "DEFAULT":
            self.fail("COLLATE DEFAULT")
        return self.collation_charset(t.text)

    def at_charset(self) -> bool:
        return self.at("CHARACTER", "SET") or self.at("CHARSET") or self.at("CHAR", "SET")

    def accept_charset_kw(self) -> bool:
        return (self.accept("CHARACTER", "SET") or self.accept("CHARSET")
                or self.accept("CHAR", "SET"))

    # ----- statements
    def statement(self) -> list[TableChange]:
        kind = _classify_words(_lead(self.toks))
        if kind == "ignore":
            return []
        if kind == "database":
            op = self.database_statement()
            if op and op[0] in ("drop", "replace"):
                return [TableChange("drop", k[0], k[1], before=t, after=None)
                        for k, t in sorted(self.cat.tables.items()) if k[0] == op[1]]
            return []
        if self.accept("CREATE"):
            return self.create()
        if self.accept("ALTER"):
            return self.alter()
        if self.accept("DROP"):
            return self.drop()
        if self.accept("RENAME"):
            return self.rename()
        if self.accept("TRUNCATE"):
            return self.truncate()
        self.fail("statement not supported")

    def database_statement(self):
        """(verb, name, charset or None) for a database statement; None for other statements."""
        if _classify_words(_lead(self.toks)) != "database":
            return None
        if self.accept("CREATE"):
            verb = "replace" if self.accept("OR", "REPLACE") else "create"
            self.next()  # DATABASE | SCHEMA
            exists = self.accept("IF", "NOT", "EXISTS")
            name = self.db_name()
            charset = self.database_options()
            if exists and name in self.cat.databases:
                return None
            return verb, name, charset
        if self.accept("ALTER"):
            self.next()
            if self.at("UPGRADE"):
                return None
            name = None
            t = self.peek()
            if t is not None and not (t.up in ("DEFAULT", "CHARACTER", "CHARSET", "COLLATE",
                                               "COMMENT", "CHAR") and t.kind == "word"):
                name = self.db_name()
            if name is None:
                if self.default_db is None:
                    self.fail("ALTER DATABASE without a name and no default database")
                name = self.default_db
            if self.at("UPGRADE"):
                return None
            return "alter", name, self.database_options()
        self.expect("DROP")
        self.next()
        self.accept("IF", "EXISTS")
        return "drop", self.db_name(), None

    def database_options(self) -> str | None:
        charset = collated = None
        while not self.done():
            self.accept("DEFAULT")
            if self.accept_charset_kw():
                charset = self.charset_value()
            elif self.accept("COLLATE"):
                collated = self.collate_value()
            elif self.accept("COMMENT"):
                self.accept("=")
                self.string()
            else:
                self.fail("database option not understood")
        return charset or collated

    # ----- CREATE TABLE
    def create(self) -> list[TableChange]:
        replace_ = self.accept("OR", "REPLACE")
        temporary = self.accept("TEMPORARY")
        if self.accept("SEQUENCE"):
            return self.create_sequence(replace_, temporary)
        self.expect("TABLE")
        if_not_exists = self.accept("IF", "NOT", "EXISTS")
        key = self.table_name()
        before = self.cat.tables.get(key)
        if temporary:
            if before is not None:
                self.fail("a temporary table that hides a base table of the same name")
            return []
        if if_not_exists and before is not None:
            return []
        if before is not None and not replace_:
            self.fail(f"table {key[0]}.{key[1]} already exists in the schema history", near=False)
        if self.at("LIKE") or self.at("(", "LIKE"):
            paren = self.accept("(")
            self.expect("LIKE")
            src = self.table_name()
            if paren:
                self.expect(")")
            if not self.done():
                self.fail("CREATE TABLE ... LIKE with more clauses")
            source = self.cat.tables.get(src)
            if source is None:
                self.fail(f"source table {src[0]}.{src[1]} is not in the schema history",
                          near=False)
            after = replace(source, db=key[0], name=key[1])
            return [TableChange("create", key[0], key[1], before=before, after=after)]
        specs: list[_ColSpec] = []
        pk: list[str] | None = None
        if not self.accept("("):
            self.fail("CREATE TABLE without column definitions (CREATE ... SELECT)")
        while True:
            if self.at("LIKE"):
                self.fail("LIKE inside the column list")
            item_pk = self.create_item(specs)
            if item_pk is not None:
                if pk is not None:
                    self.fail("two primary keys")
                pk = item_pk
            if self.accept(","):
                continue
            self.expect(")")
            break
        charset = self.table_options(create=True)
        table_charset = charset if charset is not None else self.cat.databases.get(key[0])
        after = self.build_table(key, specs, pk, table_charset)
        if self.versioned and not after.versioned:   # hidden period columns, last
            after = with_system_period(after)
        self.refuse_transaction_periods(after)
        return [TableChange("create", key[0], key[1], before=before, after=after)]

    def create_sequence(self, replace_: bool, temporary: bool) -> list[TableChange]:
        """MariaDB sequences are tables with eight fixed columns."""
        if_not_exists = self.accept("IF", "NOT", "EXISTS")
        key = self.table_name()
        before = self.cat.tables.get(key)
        if temporary:
            if before is not None:
                self.fail("a temporary sequence that hides a base table of the same name")
            return []
        if if_not_exists and before is not None:
            return []
        if before is not None and not replace_:
            self.fail(f"table {key[0]}.{key[1]} already exists in the schema history", near=False)
        depth = 0
        while not self.done():  # options only set values; AS <type> (newer servers) changes columns
            t = self.next()
            depth += (t.up == "(") - (t.up == ")")
            if depth == 0 and t.kind == "word" and t.up in ("AS", "LIKE", "SELECT"):
                self.i -= 1
                self.fail("sequence option not understood")
        columns = tuple(
            ColumnDef(name, "tinyint" if name == "cycle_option" else "bigint",
                      unsigned=name in ("cache_size", "cycle_option"), nullable=False,
                      column_type=("tinyint(1) unsigned" if name == "cycle_option" else
                                   "bigint(21) unsigned" if name == "cache_size" else "bigint(21)"))
            for name in _SEQUENCE_COLUMNS)
        after = TableDef(key[0], key[1], columns, charset=self.cat.databases.get(key[0]))
        return [TableChange("create", key[0], key[1], before=before, after=after)]

    def create_item(self, specs: list[_ColSpec]) -> list[str] | None:
        """One element of a CREATE TABLE list; returns primary key columns if it is one."""
        t = self.peek()
        if t is None:
            self.fail("unexpected end")
        if t.kind == "word" and t.up in _INDEX_WORDS:
            return self.key_definition()
        if self.at("PERIOD", "FOR"):
            self.skip_item(danger=False)     # SYSTEM_TIME's columns are marked in their own
            return None
        specs.append(self.column_spec())
        return None

    def key_definition(self) -> list[str] | None:
        """An index/constraint definition; the column names if it is the primary key."""
        if self.accept("CONSTRAINT"):
            t = self.peek()
            if t is not None and not (t.kind == "word" and t.up in _INDEX_WORDS):
                self.ident()
        if self.accept("PRIMARY", "KEY"):
            return self.primary_key_columns()
        self.skip_item(danger=False)
        return None

    def primary_key_columns(self) -> list[str]:
        if self.accept("USING"):
            self.next()
        t = self.peek()
        if t is not None and t.up != "(":
            self.ident()  # an index name (ignored by the server for PRIMARY)
            if self.accept("USING"):
                self.next()
        self.expect("(")
        cols = []
        while True:
            if self.at("("):
                self.fail("functional key part in the primary key")
            cols.append(self.ident())
            if self.at("("):
                self.skip_parens()
            self.accept("ASC") or self.accept("DESC")
            if self.accept(","):
                continue
            self.expect(")")
            break
        self.skip_item(danger=False)
        return cols

    def table_options(self, *, create: bool) -> str | None:
        """Table options up to the end; returns the default character set if set."""
        charset = collated = None
        while not self.done():
            if self.accept(","):
                continue
            got = self.table_option()
            if got is None:
                if create and self.at_any({"SELECT", "AS", "IGNORE", "REPLACE", "(", "WITH",
                                           "VALUES", "TABLE"}):
                    self.fail("CREATE ... SELECT (its column types come from the query)")
                self.fail("table option not understood")
            what, value = got
            if what == "charset":
                charset = value
            elif what == "collate":
                collated = value
            elif what == "versioning":
                self.versioned = True
            elif what == "partition":
                break
        return charset or collated

    def table_option(self):
        """One table option: ("charset"|"collate", cs), ("partition", None), ("other", None)."""
        start = self.i
        default = self.accept("DEFAULT")
        if self.accept_charset_kw():
            return "charset", self.charset_value()
        if self.accept("COLLATE"):
            return "collate", self.collate_value()
        if default:
            self.i = start
            return None
        if self.accept("WITH", "SYSTEM", "VERSIONING"):
            return "versioning", None
        if self.at("PARTITION", "BY"):
            self.skip_to_end()
            return "partition", None
        if self.accept("START", "TRANSACTION"):
            return "other", None
        if self.accept("DATA", "DIRECTORY") or self.accept("INDEX", "DIRECTORY"):
            self.option_value()
            return "other", None
        if self.accept("TABLESPACE"):
            self.accept("=")
            self.ident()
            if self.accept("STORAGE"):
                self.next()
            return "other", None
        t = self.peek()
        if t is None or t.kind != "word":
            return None
        if t.up in _TABLE_OPTIONS or (self.peek(1) is not None and self.peek(1).up == "="):
            self.i += 1
            self.option_value()
            return "other", None
        return None

    def option_value(self) -> None:
        self.accept("=")
        if self.at("("):
            self.skip_parens()
            return
        t = self.next()
        if t.kind == "op":
            self.i -= 1
            self.fail("expected an option value")

    # ----- column definitions
    def column_spec(self) -> _ColSpec:
        name = self.ident()
        spec = _ColSpec(name, self.data_type())
        self.column_attributes(spec)
        return spec

    def type_args(self) -> list[int]:
        args: list[int] = []
        if self.accept("("):
            while True:
                args.append(self.number())
                if self.accept(","):
                    continue
                self.expect(")")
                break
        return args

    def numeric_flags(self, ty: _Type) -> None:
        while True:
            if self.accept("UNSIGNED"):
                ty.unsigned = True
            elif self.accept("SIGNED"):
                pass
            elif self.accept("ZEROFILL"):
                ty.zerofill = ty.unsigned = True
            else:
                return

    def string_flags(self, ty: _Type) -> None:
        """BINARY / ASCII / UNICODE / BYTE / CHARACTER SET x / COLLATE y after a string type."""
        while True:
            if self.accept("BINARY"):
                pass  # the _bin collation of the column's character set
            elif self.accept("ASCII"):
                ty.charset = "latin1"
            elif self.accept("UNICODE"):
                ty.charset = "ucs2"
            elif self.accept("BYTE"):
                ty.charset = "binary"
            elif self.accept_charset_kw():
                ty.charset = self.charset_value()
            elif self.accept("COLLATE"):
                ty.collate_charset = self.collate_value()
            else:
                return

    def data_type(self) -> _Type:
        t = self.next()
        if t.kind != "word":
            self.i -= 1
            self.fail("expected a data type")
        w = t.up
        if w in _INT_TYPES:
            data_type, signed_w, unsigned_w = _INT_TYPES[w]
            args = self.type_args()
            ty = _Type(data_type)
            self.numeric_flags(ty)
            width = args[0] if args else (unsigned_w if ty.unsigned else signed_w)
            if len(args) > 1:
                self.fail("integer type with two arguments")
            ty.column_type = _num_type(f"{data_type}({width})", ty)
            return ty
        if w in ("BOOL", "BOOLEAN"):
            return _Type("tinyint", column_type="tinyint(1)")
        if w == "SERIAL":
            return _Type("bigint", column_type="bigint(20) unsigned", unsigned=True, serial=True)
        if w in ("DECIMAL", "DEC", "NUMERIC", "FIXED"):
            args = self.type_args()
            ty = _Type("decimal")
            self.numeric_flags(ty)
            if len(args) > 2:
                self.fail("DECIMAL with three arguments")
            ty.precision = args[0] if args else 10
            ty.scale = args[1] if len(args) > 1 else 0
            ty.column_type = _num_type(f"decimal({ty.precision},{ty.scale})", ty)
            return ty
        if w in ("FLOAT", "FLOAT4", "DOUBLE", "FLOAT8", "REAL"):
            if w == "DOUBLE":
                self.accept("PRECISION")
            is_double = w in ("DOUBLE", "FLOAT8") or (w == "REAL" and not self.real_as_float)
            args = self.type_args()
            ty = _Type("double" if is_double else "float")
            if len(args) == 1 and w == "FLOAT":
                if args[0] > 53:
                    self.fail("FLOAT precision above 53")
                ty.data_type = "double" if args[0] > 24 else "float"
                args = []
            elif len(args) == 1 or len(args) > 2:
                self.fail(f"{w} with {len(args)} arguments")
            self.numeric_flags(ty)
            base = ty.data_type + (f"({args[0]},{args[1]})" if args else "")
            ty.column_type = _num_type(base, ty)
            return ty
        if w == "BIT":
            args = self.type_args()
            bits = args[0] if args else 1
            return _Type("bit", column_type=f"bit({bits})", length=bits)
        if w in ("TIME", "DATETIME", "TIMESTAMP"):
            args = self.type_args()
            fsp = args[0] if args else 0
            dt = w.lower()
            return _Type(dt, column_type=f"{dt}({fsp})" if fsp else dt, fsp=fsp)
        if w == "YEAR":
            args = self.type_args()
            width = args[0] if args else 4
            if width not in (2, 4):
                self.fail("YEAR width other than 2 or 4")
            return _Type("year", column_type=f"year({width})")
        if w in _SIMPLE_TYPES:
            dt = _SIMPLE_TYPES[w]
            return _Type(dt, column_type=dt)
        if w == "JSON":
            return _Type("longtext", string=True, charset="utf8mb4")
        if w in ("ENUM", "SET"):
            self.expect("(")
            labels = []
            while True:
                labels.append(self.string().rstrip(" "))
                if self.accept(","):
                    continue
                self.expect(")")
                break
            ty = _Type(w.lower(), string=True, labels=tuple(labels))
            self.string_flags(ty)
            return ty
        national = False
        if w in ("NATIONAL", "NCHAR", "NVARCHAR"):
            national = True
            if w == "NATIONAL":
                w = self.next().up
                if w not in ("CHAR", "CHARACTER", "VARCHAR"):
                    self.i -= 1
                    self.fail("NATIONAL without CHAR or VARCHAR")
            elif w == "NVARCHAR":
                w = "VARCHAR"
            else:
                w = "CHAR"
        if w in ("CHAR", "CHARACTER"):
            w = "VARCHAR" if self.accept("VARYING") else "CHAR"
        elif w == "VARCHAR" and national is False and self.at("VARYING"):
            self.fail("VARCHAR VARYING")
        if w == "NCHAR" and self.accept("VARCHAR"):
            national, w = True, "VARCHAR"
        if w == "LONG":
            if self.accept("VARBINARY"):
                return _Type("mediumblob", column_type="mediumblob", charset="binary")
            self.accept("VARCHAR") or self.accept("CHAR", "VARYING")
            ty = _Type("mediumtext", string=True)
            self.string_flags(ty)
            return ty
        if w in ("CHAR", "VARCHAR"):
            args = self.type_args()
            if w == "VARCHAR" and len(args) != 1 or len(args) > 1:
                self.fail(f"{w} needs one length")
            ty = _Type(w.lower(), string=True, length=args[0] if args else 1)
            if national:
                ty.charset = self.cat.utf8_name
            self.string_flags(ty)
            return ty
        if w in ("BINARY", "VARBINARY"):
            args = self.type_args()
            if w == "VARBINARY" and len(args) != 1 or len(args) > 1:
                self.fail(f"{w} needs one length")
            n = args[0] if args else 1
            return _Type(w.lower(), column_type=f"{w.lower()}({n})", charset="binary", length=n)
        if w in ("TINYTEXT", "TEXT", "MEDIUMTEXT", "LONGTEXT"):
            args = self.type_args() if w == "TEXT" else []
            ty = _Type(w.lower(), string=True, text_chars=args[0] if args else None)
            self.string_flags(ty)
            return ty
        if w in ("TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB"):
            args = self.type_args() if w == "BLOB" else []
            dt = w.lower()
            if args:
                dt = _sized(_BLOB_SIZES, args[0])
            return _Type(dt, column_type=dt, charset="binary")
        self.i -= 1
        self.fail("data type not supported")

    def skip_value(self) -> None:
        """One DEFAULT / ON UPDATE value: a literal, name, call or parenthesised expression."""
        while self.at("-") or self.at("+") or self.at("~"):
            self.i += 1
        t = self.peek()
        if t is None:
            self.fail("missing value")
        if t.up == "(":
            self.skip_parens()
        elif t.kind == "string":
            self.string()
        elif t.kind in ("number", "hex", "bit"):
            self.i += 1
        elif t.kind == "word":
            if self.accept("NEXT", "VALUE", "FOR") or self.accept("PREVIOUS", "VALUE", "FOR"):
                self.ident()
                if self.accept("."):
                    self.ident()
                return
            self.i += 1
            if t.up in ("DATE", "TIME", "TIMESTAMP") and self.peek() is not None \
                    and self.peek().kind == "string":
                self.string()
            elif self.at("("):
                self.skip_parens()
        else:
            self.fail("value not understood")

    def column_attributes(self, spec: _ColSpec) -> None:
        while not self.done():
            t = self.peek()
            if t.kind == "op" and t.up in (",", ")"):
                return
            if t.up in ("FIRST", "AFTER"):
                return
            if self.accept("NOT", "NULL"):
                spec.null = False
            elif self.accept("NULL"):
                spec.null = True
            elif self.accept("DEFAULT"):
                if self.at("NULL"):
                    spec.has_default_null = True
                else:
                    spec.has_default_value = True
                self.skip_value()
            elif self.accept("AUTO_INCREMENT"):
                spec.auto_increment = True
            elif self.accept("UNIQUE"):
                self.accept("KEY")
            elif self.accept("PRIMARY", "KEY") or self.accept("KEY"):
                spec.primary = True
            elif self.accept("COMMENT"):
                self.string()
            elif self.accept("COLLATE"):
                spec.collate_charset = self.collate_value()
            elif self.accept_charset_kw():
                if not spec.type.string:
                    self.fail("character set on a non-string column")
                spec.type.charset = self.charset_value()
            elif self.accept("COLUMN_FORMAT") or self.accept("STORAGE"):
                self.next()
            elif self.accept("ON", "UPDATE"):
                self.skip_value()
            elif self.accept("INVISIBLE"):
                spec.invisible = True
            elif self.accept("VISIBLE"):
                spec.invisible = False
            elif self.at("GENERATED") or self.at("AS"):
                if self.accept("GENERATED"):
                    self.expect("ALWAYS")
                self.expect("AS")
                if self.accept("ROW"):       # a system-versioned table's named period column
                    if self.accept("START"):
                        spec.system = "row_start"
                    else:
                        self.expect("END")
                        spec.system = "row_end"
                    spec.generated = True
                    continue
                if not self.at("("):
                    self.fail("generated column without an expression")
                self.skip_parens()
                spec.generated = True
                # VIRTUAL when none is given
                self.accept("VIRTUAL") or self.accept("PERSISTENT") or self.accept("STORED")
            elif self.accept("REFERENCES"):
                self.table_name()
                if self.at("("):
                    self.skip_parens()
                while True:
                    if self.accept("MATCH"):
                        self.next()
                    elif self.accept("ON", "DELETE") or self.accept("ON", "UPDATE"):
                        if not (self.accept("RESTRICT") or self.accept("CASCADE")
                                or self.accept("SET", "NULL") or self.accept("SET", "DEFAULT")
                                or self.accept("NO", "ACTION")):
                            self.fail("referential action not understood")
                    else:
                        break
            elif self.at("CONSTRAINT") or self.at("CHECK"):
                if self.accept("CONSTRAINT") and not self.at("CHECK"):
                    self.ident()
                self.expect("CHECK")
                self.skip_parens()
            elif self.accept("SERIAL", "DEFAULT", "VALUE"):
                spec.null = False
                spec.auto_increment = True
            elif self.accept("COMPRESSED"):
                if self.accept("="):
                    self.next()
            elif self.accept("WITH", "SYSTEM", "VERSIONING"):
                self.versioned = True         # a versioned column makes the table versioned
            elif self.accept("WITHOUT", "SYSTEM", "VERSIONING"):
                pass
            elif self.accept("SRID"):
                self.number()
            elif self.accept("ENGINE_ATTRIBUTE") or self.accept("SECONDARY_ENGINE_ATTRIBUTE"):
                self.option_value()
            else:
                self.fail("column attribute not understood")

    # ----- building definitions
    def build_column(self, spec: _ColSpec, table_charset: str | None,
                     *, primary: bool = False) -> ColumnDef:
        ty = spec.type
        data_type, column_type, charset, length = ty.data_type, ty.column_type, None, ty.length
        if ty.string:
            charset = ty.charset or ty.collate_charset or spec.collate_charset or table_charset
            if charset is None:
                self.fail(f"column {spec.name!r} has no character set and the table's "
                          "default character set is unknown")
            if charset == "binary":
                if data_type in ("enum", "set"):
                    self.fail("ENUM/SET with the binary character set")
                data_type = {"char": "binary", "varchar": "varbinary", "tinytext": "tinyblob",
                             "text": "blob", "mediumtext": "mediumblob",
                             "longtext": "longblob"}[data_type]
            mb = self.mbmaxlen(charset)
            if ty.text_chars is not None:
                sizes = _BLOB_SIZES if charset == "binary" else _TEXT_SIZES
                data_type = _sized(sizes, ty.text_chars * mb)
            if data_type == "varchar" and length * mb > 65535:
                self.fail("VARCHAR longer than 65535 bytes")
            if data_type in ("char", "varchar", "binary", "varbinary"):
                column_type = f"{data_type}({length})"
            elif data_type in ("enum", "set"):
                column_type = f"{data_type}({','.join(_quote_label(x) for x in ty.labels)})"
            else:
                column_type = data_type
        elif ty.charset == "binary":
            charset = "binary"
        if spec.null is not None:
            nullable = spec.null
        elif data_type == "timestamp":
            if self.cat.explicit_defaults_for_timestamp is None:
                self.fail("TIMESTAMP without NULL/NOT NULL and explicit_defaults_for_timestamp "
                          "unknown")
            if not self.cat.explicit_defaults_for_timestamp and spec.has_default_null:
                self.fail("TIMESTAMP DEFAULT NULL without NULL under "
                          "explicit_defaults_for_timestamp=OFF")
            nullable = self.cat.explicit_defaults_for_timestamp
        else:
            nullable = True
        if data_type == "timestamp" and spec.null is True:
            nullable = True
        if spec.auto_increment or ty.serial or primary or spec.primary:
            nullable = False
        if spec.generated and spec.null is False and spec.system is None:
            self.fail("generated column declared NOT NULL")
        if spec.system is not None:
            nullable = False                  # a period column is never NULL
        return ColumnDef(
            name=spec.name, data_type=data_type, unsigned=ty.unsigned, charset=charset,
            enum_values=ty.labels if data_type == "enum" else (),
            set_values=ty.labels if data_type == "set" else (),
            is_primary_key=False, nullable=nullable, column_type=column_type, length=length,
            precision=ty.precision, scale=ty.scale, fsp=ty.fsp,
            invisible=bool(spec.invisible), generated=spec.generated, system=spec.system)

    def build_table(self, key: Key, specs: list[_ColSpec], pk: list[str] | None,
                    table_charset: str | None) -> TableDef:
        inline = [s.name for s in specs if s.primary]
        if inline and pk is not None or len(inline) > 1:
            self.fail("two primary keys")
        pk = pk if pk is not None else inline
        columns = [self.build_column(s, table_charset) for s in specs]
        _check_unique([c.name for c in columns], self)
        return TableDef(key[0], key[1], tuple(_with_primary_key(columns, pk, self)),
                        charset=table_charset)

    # ----- ALTER TABLE
    def alter(self) -> list[TableChange]:
        while self.accept("ONLINE") or self.accept("IGNORE"):
            pass
        self.expect("TABLE")
        if_exists = self.accept("IF", "EXISTS")
        key = self.table_name()
        self.skip_wait()
        before = self.cat.tables.get(key)
        if before is None:
            if if_exists:
                return []
            self.fail(f"table {key[0]}.{key[1]} is not in the schema history", near=False)
        op = _Alter()
        while not self.done():
            if self.accept(","):
                continue
            self.alter_spec(op)
        after = self.run_alter(before, op)
        new_key = op.rename_to or key
        if new_key != key:
            if new_key in self.cat.tables:
                self.fail(f"rename target {new_key[0]}.{new_key[1]} already exists", near=False)
            return [TableChange("rename", new_key[0], new_key[1], before=before, after=after,
                                old=key)]
        return [TableChange("alter", key[0], key[1], before=before, after=after,
                            filled=op.filled)]

    def position(self):
        if self.accept("FIRST"):
            return "FIRST"
        if self.accept("AFTER"):
            return ("AFTER", self.ident())
        return None

    def alter_spec(self, op: _Alter) -> None:
        if self.accept("ADD"):
            if self.at("COLUMN") or not (
                    self.at_any(_INDEX_WORDS) or self.at("PERIOD", "FOR") or self.at("PARTITION")
                    or self.at("SYSTEM", "VERSIONING")):
                self.accept("COLUMN")
                if_not = self.accept("IF", "NOT", "EXISTS")
                if self.accept("("):
                    while True:
                        t = self.peek()
                        if t is not None and t.kind == "word" and t.up in _INDEX_WORDS:
                            pk = self.key_definition()
                            if pk is not None:
                                op.add_pk = self.set_pk(op.add_pk, pk)
                        else:
                            op.defs.append(("add", None, self.column_spec(), None, if_not))
                        if self.accept(","):
                            continue
                        self.expect(")")
                        break
                    return
                spec = self.column_spec()
                op.defs.append(("add", None, spec, self.position(), if_not))
                return
            if self.accept("SYSTEM", "VERSIONING"):
                op.versioning = "add"
                return
            if self.at("PARTITION"):
                self.skip_to_end()
                return
            if self.at("PERIOD"):            # SYSTEM_TIME's columns are marked in their own
                self.skip_item()
                return
            pk = self.key_definition()
            if pk is not None:
                op.add_pk = self.set_pk(op.add_pk, pk)
            return
        if self.accept("CHANGE"):
            self.accept("COLUMN")
            if_exists = self.accept("IF", "EXISTS")
            old = self.ident()
            spec = self.column_spec()
            op.defs.append(("change", old, spec, self.position(), if_exists))
            return
        if self.accept("MODIFY"):
            self.accept("COLUMN")
            if_exists = self.accept("IF", "EXISTS")
            spec = self.column_spec()
            op.defs.append(("change", spec.name, spec, self.position(), if_exists))
            return
        if self.accept("DROP"):
            if self.accept("PRIMARY", "KEY"):
                op.drop_pk = True
                return
            if self.accept("INDEX") or self.accept("KEY"):
                self.accept("IF", "EXISTS")
                t = self.next()
                if t.kind in ("word", "ident") and t.text.upper() == "PRIMARY":
                    op.drop_pk = True
                return
            if self.accept("SYSTEM", "VERSIONING"):
                op.versioning = "drop"
                return
            if self.at("PARTITION"):
                self.skip_to_end()
                return
            if self.at_any({"FOREIGN", "CONSTRAINT", "CHECK"}) or self.at("PERIOD", "FOR"):
                self.skip_item(danger=False)
                return
            self.accept("COLUMN")
            if_exists = self.accept("IF", "EXISTS")
            op.drops.append((self.ident(), if_exists))
            self.accept("RESTRICT") or self.accept("CASCADE")
            return
        if self.accept("ALTER"):
            if self.at_any({"INDEX", "KEY", "CHECK", "CONSTRAINT"}):
                self.skip_item(danger=False)
                return
            self.accept("COLUMN")
            if_exists = self.accept("IF", "EXISTS")
            name = self.ident()
            if self.accept("SET", "DEFAULT"):
                self.skip_value()
            elif self.accept("DROP", "DEFAULT"):
                pass
            elif self.accept("SET", "VISIBLE"):
                op.visibility.append((name, False, if_exists))
            elif self.accept("SET", "INVISIBLE"):
                op.visibility.append((name, True, if_exists))
            else:
                self.fail("ALTER COLUMN clause not understood")
            return
        if self.accept("RENAME"):
            if self.accept("COLUMN"):
                if_exists = self.accept("IF", "EXISTS")
                old = self.ident()
                self.expect("TO")
                op.renames.append((old, self.ident(), if_exists))
                return
            if self.at_any({"INDEX", "KEY"}):
                self.skip_item(danger=False)
                return
            self.accept("TO") or self.accept("AS")
            op.rename_to = self.table_name()
            return
        if self.accept("CONVERT"):
            if not self.accept("TO"):
                self.fail("CONVERT PARTITION/TABLE")
            if not self.accept_charset_kw():
                self.fail("CONVERT TO without CHARACTER SET")
            op.convert = self.charset_value()
            if self.accept("COLLATE"):
                self.collate_value()
            return
        if self.accept("ALGORITHM") or self.accept("LOCK"):
            self.accept("=")
            self.next()
            return
        if self.accept("FORCE") or self.accept("ENABLE", "KEYS") or self.accept("DISABLE", "KEYS") \
                or self.accept("DISCARD", "TABLESPACE") or self.accept("IMPORT", "TABLESPACE") \
                or self.accept("WITH", "VALIDATION") or self.accept("WITHOUT", "VALIDATION") \
                or self.accept("REMOVE", "PARTITIONING"):
            return
        if self.accept("ORDER", "BY"):
            self.order_by_list()
            return
        if self.at_any(_PARTITION_OPS) and self.peek(1) is not None and \
                self.peek(1).up in ("PARTITION", "PARTITIONING"):
            self.skip_to_end()  # partition operations stand alone and may list partitions
            return
        got = self.table_option()
        if got is None:
            self.fail("ALTER TABLE clause not understood")
        what, value = got
        if what == "versioning":
            self.fail("WITH SYSTEM VERSIONING as an ALTER TABLE option")
        if what == "charset":
            op.charset = value
            if self.accept("COLLATE") or self.accept("DEFAULT", "COLLATE"):
                self.collate_value()
        elif what == "collate" and op.charset is None:
            op.charset = value

    def refuse_transaction_periods(self, table: TableDef) -> None:
        """A table versioned by transaction ids has its changes logged as statements, not
        rows: the stream would never see them, so the table stops here."""
        if any(c.system and c.data_type == "bigint" for c in table.columns):
            self.fail("system versioning by transaction ids (the server logs the table's "
                      "changes as statements, not rows: leave it out of source.tables and "
                      "skip it)", near=False)

    def set_pk(self, current, cols):
        if current is not None:
            self.fail("two primary keys")
        return cols

    def run_alter(self, before: TableDef, op: _Alter) -> TableDef:
        if op.convert is not None and op.defs:
            self.fail("CONVERT TO CHARACTER SET together with column definitions")
        table_charset = op.convert or op.charset or before.charset
        old = list(before.columns)
        old_names = {c.name.lower() for c in old}
        old_pk = {c.name.lower() for c in old if c.is_primary_key}
        # Which definitions apply: IF [NOT] EXISTS look at the table before the statement.
        defs = []
        added: set[str] = set()
        for verb, old_name, spec, pos, flag in op.defs:
            if verb == "add":
                lname = spec.name.lower()
                if flag and (lname in old_names or lname in added):
                    continue
                added.add(lname)
            elif old_name.lower() not in old_names:
                if flag:
                    continue
                self.fail(f"column {old_name!r} is not in the schema history's table", near=False)
            defs.append((verb, old_name, spec, pos))
        renames = []
        for old_name, new_name, flag in op.renames:
            if old_name.lower() not in old_names:
                if flag:
                    continue
                self.fail(f"column {old_name!r} is not in the schema history's table", near=False)
            renames.append((old_name, new_name))
        drops = set()
        for name, flag in op.drops:
            if name.lower() not in old_names:
                if flag:
                    continue
                self.fail(f"column {name!r} is not in the schema history's table", near=False)
            drops.add(name.lower())
        changed = [d[1].lower() for d in defs if d[0] == "change"] + [r[0].lower() for r in renames]
        if len(changed) != len(set(changed)) or drops & set(changed):
            self.fail("a column changed twice in one statement")
        # Work on (old name or None, column, in primary key) entries.
        by_old = {d[1].lower(): d for d in defs if d[0] == "change"}
        rename_of = {o.lower(): n for o, n in renames}
        new: list[list] = []
        for col in old:
            low = col.name.lower()
            if low in drops:
                if low in old_pk and len(old_pk) > 1:
                    self.fail("dropping a column of a multi-column primary key")
                continue
            if op.convert is not None:
                col = self.convert_column(col, op.convert)
            if low in by_old:
                verb, _, spec, pos = by_old[low]
                if pos is not None:
                    continue  # placed below, in statement order
                new.append([low, self.build_column(spec, table_charset), low in old_pk, spec])
            elif low in rename_of:
                new.append([low, replace(col, name=rename_of[low]), low in old_pk, None])
            else:
                new.append([low, col, low in old_pk, None])
        for verb, old_name, spec, pos in defs:
            if verb == "change" and pos is None:
                continue
            low = old_name.lower() if verb == "change" else None
            entry = [low, self.build_column(spec, table_charset), low in old_pk if low else False,
                     spec]
            if pos is None:
                new.append(entry)
            elif pos == "FIRST":
                new.insert(0, entry)
            else:
                target = pos[1].lower()
                for k, e in enumerate(new):
                    if e[1].name.lower() == target:
                        new.insert(k + 1, entry)
                        break
                else:
                    self.fail(f"AFTER {pos[1]!r}: no such column at that point", near=False)
        for name, invisible, flag in op.visibility:
            for e in new:
                if e[1].name.lower() == name.lower():
                    e[1] = replace(e[1], invisible=invisible)
                    break
            else:
                if not flag:
                    self.fail(f"ALTER COLUMN {name!r}: no such column", near=False)
        names = [e[1].name for e in new]
        _check_unique(names, self)
        # Primary key: kept through renames, dropped, or replaced.
        if op.drop_pk:
            pk = []
        else:
            pk = [e[1].name for e in new if e[2]]
            if old_pk and not op.drop_pk and op.add_pk is not None:
                self.fail("ADD PRIMARY KEY on a table that has one")
        inline = [e[1].name for e in new if e[3] is not None and e[3].primary]
        for cols in ([op.add_pk] if op.add_pk is not None else []) + ([inline] if inline else []):
            if pk:
                self.fail("two primary keys")
            pk = cols
        if not new:
            self.fail("ALTER TABLE leaves no columns")
        columns = [replace(e[1], is_primary_key=False) for e in new]
        columns = _with_primary_key(columns, pk, self)
        op.filled = _filled(new, columns, before)
        db, name = op.rename_to or (before.db, before.name)
        after = TableDef(db, name, tuple(columns), charset=table_charset)
        self.refuse_transaction_periods(after)
        hidden = any(c in SYSTEM_PERIOD for c in before.columns)
        if op.versioning == "add":
            if before.versioned:
                self.fail("ADD SYSTEM VERSIONING on a table that has it", near=False)
            return after if after.versioned else with_system_period(after)
        if op.versioning == "drop":
            if before.versioned and not hidden:
                self.fail(_VERSIONING, near=False)    # named period columns: what stays?
            return with_system_period(after, False)
        if self.versioned and not before.versioned:   # a column WITH SYSTEM VERSIONING
            self.fail("a column WITH SYSTEM VERSIONING in a table that is not versioned")
        return with_system_period(after) if hidden else after   # the hidden pair stays last

    def convert_column(self, col: ColumnDef, charset: str) -> ColumnDef:
        if col.charset is None or col.charset == "binary":
            return col
        if charset == "binary":
            self.fail("CONVERT TO CHARACTER SET binary")
        if col.data_type in _TEXT_TYPES:
            chars = _TEXT_BYTES[col.data_type] // self.mbmaxlen(col.charset)
            dt = col.data_type
            if dt != "longtext":
                dt = _sized(_TEXT_SIZES, chars * self.mbmaxlen(charset))
            return replace(col, charset=charset, data_type=dt, column_type=dt)
        if col.data_type == "varchar" and (col.length or 0) * self.mbmaxlen(charset) > 65535:
            self.fail("CONVERT TO would make a VARCHAR longer than 65535 bytes")
        return replace(col, charset=charset)

    # ----- DROP / RENAME / TRUNCATE
    def drop(self) -> list[TableChange]:
        temporary = self.accept("TEMPORARY")
        if self.accept("INDEX"):
            self.accept("IF", "EXISTS")
            self.ident()  # PRIMARY (classify sent only that here)
            self.expect("ON")
            key = self.table_name()
            self.skip_wait()
            before = self.cat.tables.get(key)
            if before is None:
                self.fail(f"table {key[0]}.{key[1]} is not in the schema history", near=False)
            if not self.done():
                self.fail("DROP INDEX clause not understood")
            cols = tuple(replace(c, is_primary_key=False) for c in before.columns)
            return [TableChange("alter", key[0], key[1], before=before,
                                after=replace(before, columns=cols))]
        if not (self.accept("TABLE") or self.accept("TABLES") or self.accept("SEQUENCE")):
            self.fail("DROP of something other than a table")
        self.accept("IF", "EXISTS")
        keys = [self.table_name()]
        while self.accept(","):
            keys.append(self.table_name())
        self.skip_wait()
        self.accept("RESTRICT") or self.accept("CASCADE")
        if not self.done():
            self.fail("DROP TABLE clause not understood")
        if temporary:
            return []
        changes, seen = [], set()
        for key in keys:
            before = self.cat.tables.get(key)
            if before is not None and key not in seen:
                seen.add(key)
                changes.append(TableChange("drop", key[0], key[1], before=before, after=None))
        return changes

    def rename(self) -> list[TableChange]:
        if not (self.accept("TABLE") or self.accept("TABLES")):
            self.fail("RENAME of something other than a table")
        if_exists = self.accept("IF", "EXISTS")
        tables = dict(self.cat.tables)
        changes = []
        while True:
            src = self.table_name()
            self.skip_wait()
            self.expect("TO")
            dst = self.table_name()
            before = tables.get(src)
            if before is None:
                if not if_exists:
                    self.fail(f"table {src[0]}.{src[1]} is not in the schema history", near=False)
            else:
                if dst in tables:
                    self.fail(f"rename target {dst[0]}.{dst[1]} already exists", near=False)
                after = replace(before, db=dst[0], name=dst[1])
                del tables[src]
                tables[dst] = after
                changes.append(TableChange("rename", dst[0], dst[1], before=before, after=after,
                                           old=src))
            if not self.accept(","):
                break
        if not self.done():
            self.fail("RENAME TABLE clause not understood")
        return changes

    def truncate(self) -> list[TableChange]:
        self.accept("TABLE")
        key = self.table_name()
        self.skip_wait()
        if not self.done():
            self.fail("TRUNCATE clause not understood")
        before = self.cat.tables.get(key)
        if before is None:
            self.fail(f"table {key[0]}.{key[1]} is not in the schema history", near=False)
        return [TableChange("truncate", key[0], key[1], before=before, after=before)]

    # ----- targets
    def dml_target(self) -> Key | None:
        verb = self.next().up
        if verb == "LOAD":                # LOAD DATA|XML ... INTO TABLE name
            while not self.done() and not self.at("INTO", "TABLE"):
                self.next()
            self.expect("INTO")
            self.expect("TABLE")
            return self.table_name()
        while self.accept("LOW_PRIORITY") or self.accept("DELAYED") or \
                self.accept("HIGH_PRIORITY") or self.accept("QUICK") or self.accept("IGNORE"):
            pass
        if verb in ("INSERT", "REPLACE"):
            self.accept("INTO")
        elif verb == "DELETE" and self.accept("FROM"):
            pass                          # DELETE FROM name ...
        return self.table_name()          # UPDATE name ..., DELETE name[, ...] FROM ...

    def targets(self) -> set[Key]:
        kind = _classify_words(_lead(self.toks))
        if kind == "ignore":
            return set()
        if kind == "database":
            if self.accept("DROP") or self.at("CREATE", "OR", "REPLACE"):
                self.i = 0
                op = self.database_statement()
                if op and op[0] in ("drop", "replace"):
                    return {k for k in self.cat.tables if k[0] == op[1]}
            return set()
        verb = self.next().up
        if verb == "CREATE":
            self.accept("OR", "REPLACE")
            self.accept("TEMPORARY")
            self.next()  # TABLE | SEQUENCE
            self.accept("IF", "NOT", "EXISTS")
            return {self.table_name()}
        if verb == "ALTER":
            while self.accept("ONLINE") or self.accept("IGNORE"):
                pass
            self.expect("TABLE")
            self.accept("IF", "EXISTS")
            found = {self.table_name()}
            depth = 0
            while not self.done():
                t = self.next()
                if t.up == "(":
                    depth += 1
                elif t.up == ")":
                    depth -= 1
                elif depth == 0 and t.kind == "word" and t.up == "RENAME" \
                        and not self.at_any({"COLUMN", "INDEX", "KEY"}):
                    self.accept("TO") or self.accept("AS")
                    found.add(self.table_name())
            return found
        if verb == "DROP":
            self.accept("TEMPORARY")
            if self.accept("INDEX"):
                self.accept("IF", "EXISTS")
                self.ident()
                self.expect("ON")
                return {self.table_name()}
            self.next()
            self.accept("IF", "EXISTS")
            found = {self.table_name()}
            while self.accept(","):
                found.add(self.table_name())
            return found
        if verb == "RENAME":
            self.next()
            self.accept("IF", "EXISTS")
            found = set()
            while True:
                found.add(self.table_name())
                self.skip_wait()
                self.expect("TO")
                found.add(self.table_name())
                if not self.accept(","):
                    return found
        if verb == "TRUNCATE":
            self.accept("TABLE")
            return {self.table_name()}
        self.fail("cannot tell the tables")


# --------------------------------------------------------------------------- helpers

def _num_type(base: str, ty: _Type) -> str:
    return base + (" unsigned" if ty.unsigned else "") + (" zerofill" if ty.zerofill else "")


def _sized(sizes, nbytes: int) -> str:
    for name, limit in sizes:
        if limit is None or nbytes <= limit:
            return name
    raise AssertionError("unreachable")


_LABEL_ESCAPES = {"'": "''", "\\": "\\\\", "\0": "\\0", "\r": "\\r", "\n": "\\n", "\x1a": "\\Z"}


def _quote_label(label: str) -> str:
    return "'" + "".join(_LABEL_ESCAPES.get(ch, ch) for ch in label) + "'"


def _check_unique(names: list[str], parser: _Parser) -> None:
    seen = set()
    for name in names:
        if name.lower() in seen:
            parser.fail(f"duplicate column {name!r}")
        seen.add(name.lower())


def _filled(new: list[list], columns: list[ColumnDef], before: TableDef) -> tuple[str, ...]:
    """Names of the columns an ALTER gave a value in the table's existing rows: an added
    column that is NOT NULL (its implicit default), has a non-NULL DEFAULT, numbers the
    rows (AUTO_INCREMENT) or is computed from the row; a column made NOT NULL (its NULLs
    become the type's zero). ``new``: run_alter's entries, parallel to ``columns``."""
    was = {c.name.lower(): c for c in before.columns}
    out = []
    for (old, _, _, spec), col in zip(new, columns):
        if spec is None:
            continue
        if old is None:
            computed = spec.generated and spec.system is None
            if not col.nullable or spec.has_default_value or spec.auto_increment or computed:
                out.append(col.name)
        elif was[old].nullable and not col.nullable:
            out.append(col.name)
    return tuple(out)


def _with_primary_key(columns: list[ColumnDef], pk: list[str], parser: _Parser) -> list[ColumnDef]:
    wanted = {n.lower() for n in pk}
    if len(wanted) != len(pk):
        parser.fail("a column twice in the primary key")
    names = {c.name.lower() for c in columns}
    if wanted - names:
        parser.fail(f"primary key names unknown columns {sorted(wanted - names)}")
    return [replace(c, is_primary_key=True, nullable=False) if c.name.lower() in wanted else c
            for c in columns]
