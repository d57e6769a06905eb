"""One frozen dataclass per binlog event kind.

These types are the contract between the decoder (``binlog.parser``) and
everything above it. Names follow the server's own (``WRITE_ROWS_EVENT`` ->
``RowsEvent`` with ``kind="c"``; MariaDB-only events carry a ``Mariadb`` prefix).

Row images are ``dict[str, value]`` keyed by column name in table order. A
column that is not in the image (MINIMAL/NOBLOB row images) is *absent* from
the dict, never reported as None. Values are already in the envelope encoding
of DESIGN.md (docs/ENVELOPE.md): ints exact, DECIMAL as a string with exactly
``scale`` decimals, temporals as strings, binary strings base64, ENUM a label,
SET a list of labels, JSON the decoded value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "EventHeader",
    "Event",
    "FormatDescriptionEvent",
    "RotateEvent",
    "QueryEvent",
    "XidEvent",
    "GtidEvent",
    "PreviousGtidsEvent",
    "MariadbGtidEvent",
    "MariadbGtidListEvent",
    "MariadbBinlogCheckpointEvent",
    "MariadbAnnotateRowsEvent",
    "RowsQueryEvent",
    "TableMapEvent",
    "RowsEvent",
    "XaPrepareEvent",
    "StopEvent",
    "HeartbeatEvent",
    "IncidentEvent",
    "IgnorableEvent",
    "UnknownEvent",
    "RowImage",
]

RowImage = dict[str, Any]


@dataclass(frozen=True, slots=True)
class EventHeader:
    timestamp: int       # seconds since the epoch, as written by the server
    type_code: int
    server_id: int
    event_size: int      # whole event incl. header and checksum
    log_pos: int         # end position of the event in its file (0 inside payloads)
    flags: int


@dataclass(frozen=True, slots=True)
class Event:
    header: EventHeader


@dataclass(frozen=True, slots=True)
class FormatDescriptionEvent(Event):
    binlog_version: int
    server_version: str
    header_length: int
    post_header_lengths: bytes
    checksum_alg: int            # 0 none, 1 CRC32, 255 undefined (pre-5.6.1)

    @property
    def is_mariadb(self) -> bool:
        return "mariadb" in self.server_version.lower()


@dataclass(frozen=True, slots=True)
class RotateEvent(Event):
    next_file: str
    next_pos: int


@dataclass(frozen=True, slots=True)
class QueryEvent(Event):
    thread_id: int
    exec_time: int
    error_code: int
    schema: str
    query: str


@dataclass(frozen=True, slots=True)
class XidEvent(Event):
    xid: int


@dataclass(frozen=True, slots=True)
class GtidEvent(Event):
    """MySQL GTID, ANONYMOUS_GTID and GTID_TAGGED.

    ``gtid`` is ``uuid:n`` (``uuid:tag:n`` when tagged) or None when anonymous.
    ``commit_ts_us`` is the immediate commit timestamp (MySQL 8.0.1+), else None.
    """

    gtid: str | None
    commit_ts_us: int | None = None
    transaction_length: int | None = None


@dataclass(frozen=True, slots=True)
class PreviousGtidsEvent(Event):
    gtid_set: str


@dataclass(frozen=True, slots=True)
class MariadbGtidEvent(Event):
    """MariaDB GTID: starts an event group. ``standalone`` means no BEGIN follows
    (DDL or other self-contained statement), so the group ends after one event."""

    domain_id: int
    server_id: int
    seq_no: int
    flags2: int
    standalone: bool

    @property
    def gtid(self) -> str:
        return f"{self.domain_id}-{self.server_id}-{self.seq_no}"


@dataclass(frozen=True, slots=True)
class MariadbGtidListEvent(Event):
    gtids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MariadbBinlogCheckpointEvent(Event):
    file: str


@dataclass(frozen=True, slots=True)
class MariadbAnnotateRowsEvent(Event):
    query: str


@dataclass(frozen=True, slots=True)
class RowsQueryEvent(Event):
    query: str


@dataclass(frozen=True, slots=True)
class TableMapEvent(Event):
    table_id: int
    schema: str
    table: str
    column_types: bytes                      # real types (MYSQL_TYPE_* codes)
    column_metas: tuple[int, ...]
    nullable: tuple[bool, ...]
    column_names: tuple[str, ...] | None     # from optional metadata, else None
    primary_key: tuple[int, ...] | None      # column indexes, from optional metadata
    optional_metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RowsEvent(Event):
    """WRITE/UPDATE/DELETE_ROWS (v0, v1, v2, MariaDB compressed, MySQL partial).

    ``kind`` is ``"c"`` (insert), ``"u"`` (update) or ``"d"`` (delete).
    ``rows`` holds ``(before, after)`` pairs; ``before`` is None for inserts and
    ``after`` None for deletes. ``rows`` is None when the table was filtered out
    (decoding skipped). ``stmt_end`` mirrors STMT_END_F.
    """

    kind: str
    table_id: int
    schema: str
    table: str
    rows: list[tuple[RowImage | None, RowImage | None]] | None
    stmt_end: bool
    column_names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class XaPrepareEvent(Event):
    one_phase: bool
    xid: str


@dataclass(frozen=True, slots=True)
class StopEvent(Event):
    pass


@dataclass(frozen=True, slots=True)
class HeartbeatEvent(Event):
    file: str


@dataclass(frozen=True, slots=True)
class IncidentEvent(Event):
    incident: int
    message: str


@dataclass(frozen=True, slots=True)
class IgnorableEvent(Event):
    """Known events that carry no row changes (INTVAR, RAND, USER_VAR, LOAD
    blocks, START_ENCRYPTION handled separately, ...): counted, not decoded."""

    name: str


@dataclass(frozen=True, slots=True)
class UnknownEvent(Event):
    """An event type we do not know and that is flagged ignorable by the server
    (LOG_EVENT_IGNORABLE_F) or cannot carry rows (e.g. Aurora padding)."""


_FACTORIES: dict[type, Any] = {}


def _fast_construction(cls: type) -> None:
    """Make building a frozen event cheap: ``__init__`` and ``factory(cls)``.

    A frozen dataclass's generated ``__init__`` goes through ``object.__setattr__``
    once per field, a costly call, and the decoder builds several events per
    transaction. Here an event is filled as an instance of a private subclass that
    adds no slots and keeps ``object``'s attribute setting, then given its real
    class: plain slot stores, the same object. Signature, defaults, equality,
    hashing and frozenness are unchanged; subclasses get per-field stores.
    """
    import dataclasses

    twin = type(f"_Filling{cls.__name__}", (cls,), {
        "__slots__": (), "__setattr__": object.__setattr__, "__delattr__": object.__delattr__})
    params, prep, stores, slow = [], [], [], []
    env: dict[str, Any] = {"_MISSING": dataclasses.MISSING, "_CLS": cls, "_TWIN": twin,
                           "_new": object.__new__, "_setattr": object.__setattr__}
    for i, f in enumerate(dataclasses.fields(cls)):
        env[f"_set{i}"] = getattr(cls, f.name).__set__
        if f.default is not dataclasses.MISSING:
            env[f"_dflt{i}"] = f.default
            params.append(f"{f.name}=_dflt{i}")
        elif f.default_factory is not dataclasses.MISSING:
            env[f"_fact{i}"] = f.default_factory
            params.append(f"{f.name}=_MISSING")
            prep.append(f"if {f.name} is _MISSING: {f.name} = _fact{i}()")
        else:
            params.append(f.name)
        stores.append(f"o.{f.name} = {f.name}")
        slow.append(f"_set{i}(self, {f.name})")
    args = ", ".join(params)
    src = "\n".join([
        f"def __init__(self, {args}):", *("    " + x for x in prep),
        "    if self.__class__ is _CLS:",
        "        o = self",
        "        _setattr(o, '__class__', _TWIN)",
        *("        " + x for x in stores),
        "        o.__class__ = _CLS",
        "    else:",
        *("        " + x for x in slow), "        pass",
        f"def factory({args}):", *("    " + x for x in prep),
        "    o = _new(_TWIN)", *("    " + x for x in stores),
        "    o.__class__ = _CLS",
        "    return o", ""])
    exec(compile(src, f"<{cls.__name__} construction>", "exec"), env)
    init = env["__init__"]
    init.__qualname__ = f"{cls.__name__}.__init__"
    cls.__init__ = init
    _FACTORIES[cls] = env["factory"]


def factory(cls: type) -> Any:
    """A function building ``cls`` from its fields, as ``cls(...)`` but without the
    type call: for the decoder's hot path."""
    return _FACTORIES[cls]


for _cls in (EventHeader, Event, FormatDescriptionEvent, RotateEvent, QueryEvent, XidEvent,
             GtidEvent, PreviousGtidsEvent, MariadbGtidEvent, MariadbGtidListEvent,
             MariadbBinlogCheckpointEvent, MariadbAnnotateRowsEvent, RowsQueryEvent,
             TableMapEvent, RowsEvent, XaPrepareEvent, StopEvent, HeartbeatEvent,
             IncidentEvent, IgnorableEvent, UnknownEvent):
    _fast_construction(_cls)
del _cls
