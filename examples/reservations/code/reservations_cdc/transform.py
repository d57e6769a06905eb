"""A python transform: each reservation change gets the weekday it starts on.

`event["after"]["starts_at"]` is a `datetime.datetime` (DATETIME column), so the
function works with real types; what it adds goes out as JSON text again.
"""

from __future__ import annotations


def add_weekday(event, helpers):
    if event["table"] != "reservation":
        return event
    for side in ("before", "after"):
        image = event[side]
        if image is not None:
            image["weekday"] = helpers.weekday(image["starts_at"])
    return event


def drop_test_rows(batch):
    """The batch form: a pyarrow.RecordBatch in, one out (here: rows of `test_*` tables
    are dropped, with one Arrow kernel for the whole batch)."""
    import pyarrow.compute as pc

    return batch.filter(pc.invert(pc.starts_with(batch.column("table"), "test_")))
