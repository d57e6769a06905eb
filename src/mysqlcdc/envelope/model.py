"""The change envelope: one record per row change, the same for every sink.

Field meanings are documented in docs/ENVELOPE.md. The Arrow schema here is
exactly what Spark derives from ``ENVELOPE_DDL`` (all fields nullable,
``timestamp`` free), so record batches can be handed to Spark unchanged.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["ENVELOPE_FIELDS", "ENVELOPE_DDL", "ARROW_SCHEMA", "OP_INSERT", "OP_UPDATE", "OP_DELETE",
           "OP_READ", "OP_TRUNCATE", "OP_SCHEMA", "OP_ROLLBACK", "ROW_OPS"]

OP_INSERT = "c"
OP_UPDATE = "u"
OP_DELETE = "d"
OP_READ = "r"
OP_TRUNCATE = "t"
OP_SCHEMA = "s"      # a DDL changed a table's definition (before/after: the definitions)
# the transaction ended with ROLLBACK although the binlog holds its rows (tables that cannot
# roll back, such as MyISAM); only with the reader's emitRollbacks option (the plugins sink)
OP_ROLLBACK = "x"
ROW_OPS = (OP_INSERT, OP_UPDATE, OP_DELETE, OP_READ)

# (name, spark DDL type, arrow type) in envelope order.
ENVELOPE_FIELDS: tuple[tuple[str, str, pa.DataType], ...] = (
    ("op", "STRING", pa.string()),
    ("db", "STRING", pa.string()),
    ("table", "STRING", pa.string()),
    ("before", "STRING", pa.string()),
    ("after", "STRING", pa.string()),
    ("key", "STRING", pa.string()),
    ("ts_ms", "BIGINT", pa.int64()),
    ("server_id", "BIGINT", pa.int64()),
    ("gtid", "STRING", pa.string()),
    ("txn_id", "STRING", pa.string()),
    ("file", "STRING", pa.string()),
    ("pos", "BIGINT", pa.int64()),
    ("row", "INT", pa.int32()),
    ("seq", "DECIMAL(38,0)", pa.decimal128(38, 0)),
    ("query", "STRING", pa.string()),
    ("moved_key", "STRING", pa.string()),
)

ENVELOPE_DDL = ", ".join(f"`{name}` {ddl}" for name, ddl, _ in ENVELOPE_FIELDS)
ARROW_SCHEMA = pa.schema([pa.field(name, typ, nullable=True) for name, _, typ in ENVELOPE_FIELDS])
