"""Helper functions handed to user code as ``helpers.name(...)``.

Built in: :func:`obfuscate`, :func:`hash` and :func:`mask`. The modules listed in the
config's ``helpers:`` add every public function they define (a name not starting
with ``_``, defined in that module, not imported into it). A python transform that
takes a second parameter receives them (``def transform(event, helpers)``); plugins
find them as ``ctx.helpers``.

>>> from mysqlcdc.transforms.helpers import Helpers
>>> h = Helpers.build(())
>>> h.mask("4111111111111111"), h.obfuscate("Ada L. 42"), h.hash("x", "salt")[:12]
('************1111', 'Xxx X. 00', '8a11e2bd8a4b')
"""

from __future__ import annotations

import hashlib
import inspect
import types
from typing import Any, Callable, Iterable

from mysqlcdc.errors import ConfigError

__all__ = ["Helpers", "obfuscate", "hash", "mask", "BUILTIN_HELPERS"]


def obfuscate(text: Any) -> Any:
    """The text with every letter replaced by ``x`` (``X`` for capitals) and every digit by
    ``0``; punctuation, spaces and length kept (None stays None)."""
    if text is None:
        return None
    return "".join("X" if c.isupper() else "x" if c.isalpha() else "0" if c.isdigit() else c
                   for c in str(text))


def hash(value: Any, salt: str = "") -> str | None:   # noqa: A001 - the documented name
    """Salted SHA-256 of the value's text, as 64 hex digits (None stays None). Equal values
    hash equally under one salt, so joins and grouping still work."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        data = bytes(value)
    else:
        data = str(value).encode()
    return hashlib.sha256(salt.encode() + data).hexdigest()


def mask(text: Any, keep_last: int = 4, char: str = "*") -> Any:
    """The text with all but its last ``keep_last`` characters replaced by ``char``
    (all of it when it is not longer than that; None stays None)."""
    if text is None:
        return None
    s = str(text)
    if len(s) <= keep_last:
        return char * len(s)
    return char * (len(s) - keep_last) + (s[-keep_last:] if keep_last else "")


BUILTIN_HELPERS: dict[str, Callable] = {"obfuscate": obfuscate, "hash": hash, "mask": mask}


class Helpers(types.SimpleNamespace):
    """The helper functions, as attributes."""

    @classmethod
    def build(cls, modules: Iterable[str]) -> "Helpers":
        """The built-ins plus every public function of ``modules`` (imported by name).
        A user function named like a built-in or like one of another module's is an error."""
        import importlib

        functions: dict[str, Callable] = dict(BUILTIN_HELPERS)
        origin = {name: "built-in" for name in functions}
        for name in modules:
            try:
                module = importlib.import_module(name)
            except Exception as err:   # noqa: BLE001 - any import failure is the user's
                raise ConfigError(f"helpers: cannot import module {name!r}: "
                                  f"{type(err).__name__}: {err}",
                                  hint="Put the module on PYTHONPATH or in a transforms_path "
                                  "folder, and check it imports on its own.") from None
            for fn_name, fn in public_functions(module).items():
                if fn_name in functions:
                    raise ConfigError(f"helpers: {name}.{fn_name} has the name of the "
                                      f"{origin[fn_name]} helper {fn_name!r}",
                                      hint="Rename one of them.")
                functions[fn_name], origin[fn_name] = fn, f"{name} module's"
        return cls(**functions)

    def names(self) -> list[str]:
        return sorted(vars(self))


def public_functions(module: types.ModuleType) -> dict[str, Callable]:
    """Functions defined in ``module`` whose names do not start with ``_``."""
    return {name: fn for name, fn in vars(module).items()
            if not name.startswith("_") and inspect.isfunction(fn)
            and fn.__module__ == module.__name__}
