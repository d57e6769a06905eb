"""Finding user code: ``"mypkg.cdc:transform"`` paths, ``transforms_path`` folders, and
the files that carry it to a cluster's executors.

A path is ``module:attribute`` (``mypkg.audit:AuditPlugin``); the module is imported
from ``sys.path`` as the pipeline's process sees it, with the config's
``transforms_path`` folders in front. Spark tasks run in other processes (on a
cluster, other machines), so :func:`ship_files` names what must travel with the job:
for each user module its top-level package folder, zipped, or its single ``.py`` file
(``mysqlcdc.spark.transforms`` hands them to ``SparkContext.addPyFile``).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Iterable

from mysqlcdc.errors import ConfigError

__all__ = ["split_path", "resolve", "add_search_paths", "ship_files", "DOTTED"]

DOTTED = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
_HINT = ("Put the module on PYTHONPATH or in a folder named in transforms_path, and check "
         "that `python -c 'import MODULE'` works.")


def split_path(path: str) -> tuple[str, str]:
    """``"pkg.mod:fn"`` -> ``("pkg.mod", "fn")``; ConfigError for anything else."""
    if not DOTTED.match(path or ""):
        raise ConfigError(f"{path!r} is not a module:attribute path such as mypkg.cdc:transform")
    module, _, attr = path.partition(":")
    return module, attr


def add_search_paths(folders: Iterable[str]) -> None:
    """Put the ``transforms_path`` folders first on ``sys.path`` (once each)."""
    for folder in reversed([str(Path(f).resolve()) for f in folders]):
        if folder not in sys.path:
            sys.path.insert(0, folder)


def resolve(path: str, what: str = "transform") -> Any:
    """Import ``module`` and return its ``attribute`` (ConfigError naming what failed)."""
    module_name, attr = split_path(path)
    try:
        module = importlib.import_module(module_name)
    except Exception as err:   # noqa: BLE001 - any failure while importing is the user's
        raise ConfigError(f"{what} {path!r}: cannot import module {module_name!r}: "
                          f"{type(err).__name__}: {err}", hint=_HINT) from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"{what} {path!r}: module {module_name!r} has no {attr!r}",
                              hint="Check the name after the colon.")
        target = getattr(target, part)
    return target


def ship_files(modules: Iterable[str], folder: str | None = None) -> list[str]:
    """The files that carry ``modules`` (imported names) to executors: a zip of each
    top-level package, or the module's own ``.py`` file. Modules of the standard
    library and of installed distributions (site-packages) are not shipped."""
    out: list[str] = []
    for top in sorted({m.split(".")[0] for m in modules}):
        module = sys.modules.get(top) or importlib.import_module(top)
        origin = getattr(module, "__file__", None)
        if origin is None or _installed(origin) or top == "mysqlcdc":
            continue
        source = Path(origin)
        if source.name == "__init__.py":
            out.append(_zip_package(source.parent, folder))
        else:
            out.append(str(source))
    return list(dict.fromkeys(out))


def _installed(origin: str) -> bool:
    parts = Path(origin).parts
    return "site-packages" in parts or "dist-packages" in parts or \
        origin.startswith(os.path.dirname(os.__file__))


def _zip_package(package: Path, folder: str | None) -> str:
    """A zip of ``package`` named by its content, so the same code is the same file."""
    files = sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)
    digest = hashlib.sha256()
    for p in files:
        digest.update(str(p.relative_to(package.parent)).encode())
        digest.update(p.read_bytes())
    target_dir = Path(folder or tempfile.gettempdir()) / "mysqlcdc-user-code"
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / f"{package.name}-{digest.hexdigest()[:16]}.zip"
    if not target.exists():
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for p in files:
                zf.write(p, str(p.relative_to(package.parent)))
        os.replace(tmp, target)
    return str(target)
