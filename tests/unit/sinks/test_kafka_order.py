"""The Kafka write task's ordering by seq within a memory budget (sinks.kafka.order)."""

from __future__ import annotations

import os
import random
from decimal import Decimal

import pyarrow as pa
import pytest

from mysqlcdc.envelope.model import ARROW_SCHEMA
from mysqlcdc.sinks.kafka.order import SeqSorter

pytestmark = pytest.mark.unit


def _batch(seqs: list[int]) -> pa.RecordBatch:
    n = len(seqs)
    cols = {f.name: pa.nulls(n, f.type) for f in ARROW_SCHEMA}
    cols["seq"] = pa.array([Decimal(s) for s in seqs], ARROW_SCHEMA.field("seq").type)
    cols["key"] = pa.array([f'{{"id":{s}}}' for s in seqs], pa.string())
    return pa.RecordBatch.from_arrays([cols[f.name] for f in ARROW_SCHEMA], schema=ARROW_SCHEMA)


def _runs_of(rng: random.Random, runs: int, per_run: int) -> list[list[int]]:
    """Seq ranges as slices of a batch deliver them: each sorted, arriving in any order."""
    base = 10**24 * 7
    spans = [sorted(base + r * 10**15 + rng.randrange(10**12) * 2 for _ in range(per_run))
             for r in range(runs)]
    rng.shuffle(spans)
    return spans


@pytest.mark.parametrize("budget", [1 << 30, 20_000])
def test_rows_come_out_in_seq_order_within_the_budget(tmp_path, budget):
    rng = random.Random(5)
    spans = _runs_of(rng, 4, 3000)
    sorter = SeqSorter(budget, spill_dir=str(tmp_path))
    for span in spans:
        for i in range(0, len(span), 700):
            sorter.add(_batch(span[i:i + 700]))
    spilled = len(sorter.runs)
    out = [b for b in sorter.sorted()]
    seqs = [int(v) for b in out for v in b.column("seq").to_pylist()]
    assert seqs == sorted(s for span in spans for s in span)
    assert [b.column("key").to_pylist() for b in out][0][0] == f'{{"id":{seqs[0]}}}'
    assert (spilled > 3) == (budget < 1 << 20)   # the small budget spilled sorted runs
    assert os.listdir(tmp_path) == []            # and removed them afterwards


def test_nothing_added_gives_nothing():
    assert list(SeqSorter(1024).sorted()) == []
