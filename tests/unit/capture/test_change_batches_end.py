"""Where iter_change_batches stops: at ``end`` across files, at a boundary at
or past ``end``, never on artificial events, and loudly when the input runs dry."""

from __future__ import annotations

import pytest

from mysqlcdc.capture.changes import FileEvent, iter_change_batches
from mysqlcdc.errors import ConnectionLostError
from mysqlcdc.types import BinlogPosition

pytestmark = pytest.mark.unit


class Recorder:
    """Stands in for a ChangeDecoder: records what it is fed; boundaries scripted."""

    def __init__(self, boundaries: dict[tuple[str, int], tuple[str, int]] | None = None) -> None:
        self.builder: list = []
        self.boundary = None
        self.fed: list[tuple[str, int]] = []
        self.boundaries = boundaries or {}

    def feed(self, raw) -> None:                  # artificial events
        self.feed_raw(raw.file, raw.pos, raw.data)

    def feed_raw(self, file: str, pos: int, data: bytes) -> bool:
        self.fed.append((file, pos))
        self.boundary = self.boundaries.get((file, pos), self.boundary)
        return False

    def take(self):
        return None


def events(*spec: tuple[str, int] | tuple[str, int, bool]) -> list[FileEvent]:
    return [FileEvent(s[0], s[1], b"", *s[2:]) for s in spec]


RAWS = events(("bin.000009", 4), ("bin.000009", 100), ("bin.000009", 200, True),
              ("bin.000010", 4), ("bin.000010", 100), ("bin.000011", 4))


@pytest.mark.parametrize("end, fed", [
    (BinlogPosition.of("bin.000009", 100), 1),
    (BinlogPosition.of("bin.000009", 150), 3),    # the artificial event is fed, not compared
    (BinlogPosition.of("bin.000010", 4), 3),
    (BinlogPosition.of("bin.000010", 5), 4),
    (BinlogPosition.of("bin.000010", 9999), 5),    # a later file is past any offset of the end's
    (BinlogPosition.of("bin.000011", 4), 5),
])
def test_stops_before_the_first_real_event_at_or_after_end(end, fed):
    decoder = Recorder()
    list(iter_change_batches(RAWS, decoder, end=end))
    assert decoder.fed == [(e.file, e.pos) for e in RAWS[:fed]]


def test_stops_after_an_event_whose_boundary_reaches_end_even_in_another_file():
    decoder = Recorder({("bin.000009", 4): ("bin.000009", 100), ("bin.000009", 100): ("bin.000010", 4)})
    list(iter_change_batches(RAWS, decoder, end=BinlogPosition.of("bin.000010", 4)))
    assert decoder.fed == [("bin.000009", 4), ("bin.000009", 100)]


def test_a_boundary_set_before_the_loop_counts_too():
    decoder = Recorder()
    decoder.boundary = ("bin.000012", 4)
    list(iter_change_batches(RAWS, decoder, end=BinlogPosition.of("bin.000011", 4)))
    assert decoder.fed == [("bin.000009", 4)]


def test_without_end_everything_is_fed_and_running_dry_before_end_raises():
    decoder = Recorder()
    list(iter_change_batches(RAWS, decoder))
    assert len(decoder.fed) == len(RAWS)
    with pytest.raises(ConnectionLostError, match="ended before the end of the range"):
        list(iter_change_batches(RAWS, Recorder(), end=BinlogPosition.of("bin.000011", 5)))
