"""The processes a test's subprocess started, read from /proc."""

from __future__ import annotations

from pathlib import Path


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` now (children, their children, ...). A process's
    children are listed under the thread that started each of them: a JVM starts its
    Python workers from threads other than its main one, so every thread is read."""
    out, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        kids: list[str] = []
        try:
            threads = list(Path(f"/proc/{parent}/task").iterdir())
        except OSError:
            continue
        for thread in threads:
            try:
                kids += (thread / "children").read_text().split()
            except OSError:
                continue
        for kid in map(int, kids):
            if kid not in out:
                out.add(kid)
                todo.append(kid)
    return out
