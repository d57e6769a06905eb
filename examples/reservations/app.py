"""The application side of the example: reservations written together with their outbox
events, one transaction each.

    python examples/reservations/app.py mysql://root:secret@127.0.0.1:3306

creates the schema (schema.sql) in `mysqlcdc_demo` when it is missing, then books a few
reservations, confirms one, renames a user right after a booking (the race flattening
must get right) and cleans the outbox up (the outbox transform ignores deletes).
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from urllib.parse import unquote, urlparse

import pymysql

DB = "mysqlcdc_demo"


def connect(url: str, database: str | None = DB):
    u = urlparse(url)
    return pymysql.connect(host=u.hostname, port=u.port or 3306, user=unquote(u.username or "root"),
                           password=unquote(u.password or ""), database=database, autocommit=False)


def create_schema(url: str, db: str = DB) -> None:
    conn = connect(url, None)
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND "
                    "table_name = 'cdc_outbox'", (db,))
        if cur.fetchone() is None:
            sql = (Path(__file__).parent / "schema.sql").read_text().replace(DB, db)
            for statement in _statements(sql):
                cur.execute(statement)
    conn.commit()
    conn.close()


def _statements(sql: str) -> list[str]:
    lines = [line.split("--")[0] for line in sql.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def book(cur, reservation_id: int, user_id: int, thing_id: int, starts_at: str) -> None:
    """A reservation and its ReservationBooked event: one transaction."""
    cur.execute("INSERT INTO reservation VALUES (%s,%s,%s,%s,'pending')",
                (reservation_id, user_id, thing_id, starts_at))
    outbox(cur, "reservation", reservation_id, "ReservationBooked",
           {"reservation": reservation_id, "user": user_id, "thing": thing_id,
            "starts_at": starts_at})


def outbox(cur, aggregate: str, aggregate_id, event_type: str, payload: dict) -> None:
    cur.execute("INSERT INTO cdc_outbox (id, aggregatetype, aggregateid, type, payload) "
                "VALUES (%s,%s,%s,%s,%s)", (str(uuid.uuid4()), aggregate, str(aggregate_id),
                                            event_type, json.dumps(payload)))


def run(url: str, first_id: int = 1, db: str = DB) -> None:
    create_schema(url, db)
    conn = connect(url, db)
    with conn.cursor() as cur:
        cur.execute("INSERT IGNORE INTO user VALUES (1,'Ada','ada@example.com'),"
                    "(2,'Linus','linus@example.com')")
        cur.execute("INSERT IGNORE INTO thing VALUES (1,'Kayak',35.00),(2,'Tent',12.50)")
        conn.commit()
        book(cur, first_id, 1, 1, "2026-06-01 09:00:00")
        conn.commit()
        # right after the booking, Ada changes her name: the booking's flattened event
        # must still show the name she had when she booked
        cur.execute("UPDATE user SET name = 'Ada Lovelace' WHERE id = 1")
        conn.commit()
        book(cur, first_id + 1, 2, 2, "2026-06-02 10:30:00")
        conn.commit()
        cur.execute("UPDATE reservation SET status = 'confirmed' WHERE id = %s", (first_id,))
        outbox(cur, "reservation", first_id, "ReservationConfirmed", {"reservation": first_id})
        conn.commit()
        cur.execute("DELETE FROM cdc_outbox")            # housekeeping: never published
        conn.commit()
    conn.close()


if __name__ == "__main__":
    run(sys.argv[1] if len(sys.argv) > 1 else "mysql://root@127.0.0.1:3306")
