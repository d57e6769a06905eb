"""Counting the transactions a replication stream passes over (DESIGN.md decision 27)."""

from __future__ import annotations

from mysqlcdc.capture.changes import PassOver


def count_passes(monkeypatch) -> list[int]:
    """A list that gets the number of events of each transaction passed over from now on."""
    passed: list[int] = []
    original = PassOver.passed

    def counted(self, count):
        passed.append(count)
        return original(self, count)
    monkeypatch.setattr(PassOver, "passed", counted)
    return passed
