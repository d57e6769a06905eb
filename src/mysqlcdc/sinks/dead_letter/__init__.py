"""Dead-letter sink: events a transform could not process, with the error (see :mod:`.writer`)."""

from __future__ import annotations

from mysqlcdc.sinks.dead_letter.settings import DeadLetterSettings, from_config
from mysqlcdc.sinks.dead_letter.writer import DEAD_LETTER_SCHEMA, make_writer, read_dead_letters

__all__ = ["DeadLetterSettings", "from_config", "make_writer", "read_dead_letters",
           "DEAD_LETTER_SCHEMA"]
