"""Redis mirror target: a cache kept in sync, one hash per row.

Key: ``key_template`` over ``{db}``, ``{table}`` and ``{pk}`` (the primary-key values
joined by ``:``), default ``{db}:{table}:{pk}``. Fields: one per column; values as text
(numbers as written, DECIMAL with its scale, dates as the source shows them, SET labels
joined by commas, JSON as JSON text), BINARY/BLOB as their bytes; a NULL column has no
field. A delete removes the key; ``ttl_s`` sets an expiry on every written key.

Each batch is one MULTI/EXEC, together with ``HSET mysqlcdc:offsets:<pipeline>@<query id>
batch_id position seq``; the offsets key is WATCHed from the read of the last batch id
to EXEC, so a replayed batch is skipped. Table-wide changes (truncate, drop, rename,
dropped or renamed columns) are Lua scripts queued in the same MULTI, run in order.
Added and retyped columns need nothing (a hash has no types).
"""

from __future__ import annotations

import base64
import json

from mysqlcdc.schema.model import ColumnDef, TableDef
from mysqlcdc.sinks.mirror.values import BINARY_TYPES, TEXT_TYPES
from mysqlcdc.sinks.mirror.writer import (ColumnChange, RetryableTargetError, TableRefused,
                                          TargetAuthError)

__all__ = ["RedisTarget"]

_EACH = """
local cursor = '0'
repeat
  local r = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = r[1]
  for _, k in ipairs(r[2]) do
    %s
  end
until cursor == '0'
return 1
"""
DEL_PREFIX = _EACH % "redis.call('DEL', k)"
RENAME_PREFIX = _EACH % ("redis.call('RENAME', k, ARGV[3] .. string.sub(k, string.len(ARGV[2]) + 1))")
HDEL_PREFIX = _EACH % "redis.call('HDEL', k, ARGV[2])"
HRENAME_PREFIX = _EACH % ("local v = redis.call('HGET', k, ARGV[2]) "
                          "if v then redis.call('HSET', k, ARGV[3], v) "
                          "redis.call('HDEL', k, ARGV[2]) end")


def _glob(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class RedisTarget:
    transactional_ddl = True

    def __init__(self, settings) -> None:
        self.s = settings
        self.r = None
        self.pipe = None
        self.queue: list[tuple] = []
        self.marks: list[int] = []

    def connect(self) -> None:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # no client-side retries: the mirror's own backoff (logged, bounded) replays the batch
        self.r = redis.Redis(host=self.s.host, port=self.s.port, username=self.s.user or None,
                             retry=Retry(NoBackoff(), 0),
                             password=self.s.password or None, db=int(self.s.database or 0),
                             socket_timeout=max(5.0, self.s.connect_timeout_s),
                             socket_connect_timeout=self.s.connect_timeout_s)
        try:
            self.r.ping()
        except (redis.AuthenticationError, redis.exceptions.AuthenticationWrongNumberOfArgsError):
            raise TargetAuthError(f"at {self.s.host}:{self.s.port}") from None
        except redis.ResponseError as err:
            if "NOAUTH" in str(err) or "WRONGPASS" in str(err):
                raise TargetAuthError(f"at {self.s.host}:{self.s.port}") from None
            raise
        except (redis.ConnectionError, redis.TimeoutError) as err:
            raise RetryableTargetError(str(err)) from None

    def close(self) -> None:
        if self.pipe is not None:
            self.pipe.reset()
        if self.r is not None:
            self.r.close()

    def _call(self, fn, *args):
        import redis

        try:
            return fn(*args)
        except (redis.ConnectionError, redis.TimeoutError) as err:
            raise RetryableTargetError(str(err)) from None

    # -- batch ----------------------------------------------------------------
    def _offsets(self, pipeline: str) -> str:
        return f"mysqlcdc:offsets:{pipeline}"

    def begin(self, pipeline: str):
        self.pipe = self.r.pipeline(transaction=True)
        self._call(self.pipe.watch, self._offsets(pipeline))
        raw = self._call(self.pipe.hget, self._offsets(pipeline), "batch_id")
        stopped_raw = self._call(self.pipe.smembers, f"mysqlcdc:stopped:{pipeline}")
        stopped = {tuple(json.loads(m)) for m in stopped_raw}
        self.queue = []
        return (int(raw) if raw is not None else None), stopped

    def commit(self, pipeline: str, batch_id: int, position: str, seq: str) -> None:
        import redis

        self.queue.append(("hset", self._offsets(pipeline),
                           {"batch_id": batch_id, "position": position, "seq": seq}))
        self.pipe.multi()
        for op, *args in self.queue:
            if op == "eval":
                script, *argv = args
                self.pipe.eval(script, 0, *argv)
            elif op == "hset":
                self.pipe.hset(args[0], mapping=args[1])
            else:
                getattr(self.pipe, op)(*args)
        try:
            self.pipe.execute()
        except redis.WatchError:
            raise RetryableTargetError("another writer changed the offsets key") from None
        except (redis.ConnectionError, redis.TimeoutError) as err:
            raise RetryableTargetError(str(err)) from None
        finally:
            self.queue = []

    def rollback(self) -> None:
        self.queue = []
        if self.pipe is not None:
            self.pipe.reset()

    def savepoint(self) -> None:
        self.marks.append(len(self.queue))

    def rollback_savepoint(self) -> None:
        del self.queue[self.marks.pop():]

    def release_savepoint(self) -> None:
        self.marks.pop()

    def stop_table(self, pipeline, db, table, code, message, seq) -> None:
        self.queue.append(("sadd", f"mysqlcdc:stopped:{pipeline}", json.dumps([db, table])))
        self.queue.append(("hset", f"mysqlcdc:stopped:{pipeline}:{db}.{table}",
                           {"code": code, "message": message, "seq": seq}))

    def read_position(self, pipeline: str) -> dict:
        got = {k.decode(): v.decode() for k, v in
               self._call(self.r.hgetall, self._offsets(pipeline)).items()}
        stopped = []
        for m in sorted(self._call(self.r.smembers, f"mysqlcdc:stopped:{pipeline}")):
            db, table = json.loads(m)
            info = {k.decode(): v.decode() for k, v in self._call(
                self.r.hgetall, f"mysqlcdc:stopped:{pipeline}:{db}.{table}").items()}
            stopped.append({"table": f"{db}.{table}", **info})
        return {"batch_id": int(got["batch_id"]) if "batch_id" in got else None,
                "position": got.get("position"), "seq": got.get("seq"), "committed_at": None,
                "stopped": stopped}

    # -- tables ---------------------------------------------------------------
    def _prefix(self, db: str, table: str) -> str:
        t = self.s.key_template
        if not t.endswith("{pk}"):
            raise TableRefused("key_template must end with {pk} for table-wide changes")
        return t[:-4].format(db=db, table=table)

    def table_exists(self, db: str, table: str) -> bool:
        return True          # keys appear with their rows

    def create_table(self, d: TableDef) -> None:
        pass

    def drop_table(self, db: str, table: str) -> None:
        self.queue.append(("eval", DEL_PREFIX, _glob(self._prefix(db, table)) + "*"))

    truncate = drop_table

    def rename_table(self, old, new) -> None:
        p_old, p_new = self._prefix(*old), self._prefix(*new)
        self.queue.append(("eval", RENAME_PREFIX, _glob(p_old) + "*", p_old, p_new))

    def alter_table(self, before: TableDef, after: TableDef, changes: list[ColumnChange]) -> None:
        if before.primary_key != after.primary_key:
            if not after.primary_key:
                raise TableRefused("the table has no primary key any more; keys need one")
            # every key name changes: the table's keys go, and the backfill the pipeline
            # queued at this DDL (a key change, DESIGN.md decision 33) writes them again
            self.truncate(after.db, after.name)
            return
        pattern = _glob(self._prefix(after.db, after.name)) + "*"
        for ch in changes:
            if ch.kind == "drop":
                self.queue.append(("eval", HDEL_PREFIX, pattern, ch.old_name))
            elif ch.kind == "rename":
                self.queue.append(("eval", HRENAME_PREFIX, pattern, ch.old_name, ch.column.name))

    # -- rows -----------------------------------------------------------------
    def _key(self, d: TableDef, row: dict) -> str:
        cols = {c.name: c for c in d.columns}
        pk = ":".join(_text(cols[n], row.get(n)) if not isinstance(row.get(n), bytes) else
                      row[n].hex() for n in d.primary_key)
        return self.s.key_template.format(db=d.db, table=d.name, pk=pk)

    def upsert(self, d: TableDef, rows: list[dict]) -> None:
        cols = {c.name: c for c in d.columns}
        full = set(cols)
        for row in rows:
            key = self._key(d, row)
            values = {n: _value(cols[n], v) for n, v in row.items() if n in cols and v is not None}
            nulls = [n for n, v in row.items() if n in cols and v is None]
            if full <= set(row):
                self.queue.append(("delete", key))
            elif nulls:
                self.queue.append(("hdel", key, *nulls))
            if values:
                self.queue.append(("hset", key, values))
            if self.s.ttl_s:
                self.queue.append(("expire", key, int(self.s.ttl_s)))

    def delete(self, d: TableDef, keys: list[dict]) -> None:
        for k in keys:
            self.queue.append(("delete", self._key(d, k)))


def _value(col: ColumnDef, v):
    if col.data_type in BINARY_TYPES or (col.data_type in TEXT_TYPES and col.charset == "binary"):
        return base64.b64decode(v)
    return _text(col, v)


def _text(col: ColumnDef, v) -> str:
    if v is None:
        return ""
    if col.data_type == "set" and isinstance(v, list):
        return ",".join(v)
    if isinstance(v, (dict, list)) or col.data_type == "json":
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)
