"""``Secret``: a string that never shows itself.

A password is resolved once, when the config is loaded, and then travels inside
a ``Secret``. ``repr``/``str``/format and every pydantic dump print ``'***'``;
only :meth:`Secret.reveal` returns the value. It still pickles (a Spark reader
on an executor needs the password to connect), so treat pickles as sensitive.

>>> s = Secret("hunter2")
>>> s, str(s), f"{s}"
(Secret('***'), '***', '***')
>>> s.reveal()
'hunter2'
"""

from __future__ import annotations

from typing import Any

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

__all__ = ["Secret", "MASK"]

MASK = "***"


class Secret:
    """A secret string; shown as ``'***'`` everywhere except :meth:`reveal`."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The real value. Call it only where the value is used (the connect call)."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret({MASK!r})"

    def __str__(self) -> str:
        return MASK

    def __format__(self, spec: str) -> str:
        return MASK

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    def __getstate__(self) -> str:
        return self._value

    def __setstate__(self, state: str) -> None:
        self._value = state

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        """Validate from ``str`` (or a ``Secret``); always serialize as ``'***'``."""
        from_str = core_schema.no_info_after_validator_function(cls, core_schema.str_schema())
        return core_schema.union_schema(
            [core_schema.is_instance_schema(cls), from_str],
            serialization=core_schema.plain_serializer_function_ser_schema(lambda _: MASK),
        )
