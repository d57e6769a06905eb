"""The pace of Python's cyclic garbage collector in mysqlcdc's own loops.

CPython scans its youngest generation of container objects (tuples, lists, dicts,
instances) every 700 new ones, and every object that survives a scan is scanned again
in the older generations. mysqlcdc's loops make many such objects and keep most of them
alive for a while: the decoder keeps a batch's row images until the batch is built, the
Kafka sink a batch's header lists until they are sent. None of them is part of a
reference cycle, so every scan finds nothing to free, yet at the default pace the scans
took up to a tenth of the decoder's CPU and a third of encoding a Kafka batch
(DESIGN.md decision 25; docs/BENCHMARKS.md, stops 30 and 39).

:func:`fewer_collections` makes the youngest generation scan every
:data:`YOUNG_THRESHOLD` new objects instead. Objects that are no cycle's part are still
freed the moment their last reference goes; a cycle waits at most that many allocations
longer to be found (a few MB at most). The threshold belongs to the process, so the loops
that profit call it when they start: the decoder's (``capture.changes``,
``capture.batchend``, ``capture.offline``) and the Kafka sink's encoder. A process that
turned automatic collection off, or set a higher threshold, keeps its own choice.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "fewer_collections"]

# On the 1M-row bench binlogs (bench/hotpath.py, one core, one run each: indicative),
# 10,000 gave wide rows most of the gain and narrow ones none; 200,000 less than 50,000.
YOUNG_THRESHOLD = 50_000


def fewer_collections() -> None:
    """Raise this process's youngest-generation threshold to :data:`YOUNG_THRESHOLD`
    (never lower it; a disabled collector stays disabled)."""
    first, *older = gc.get_threshold()
    if 0 < first < YOUNG_THRESHOLD:
        gc.set_threshold(YOUNG_THRESHOLD, *older)
