"""Helper functions: every public function here is `helpers.NAME` in transforms and
`ctx.helpers.NAME` in plugins (next to the built-in obfuscate, hash and mask)."""

from __future__ import annotations


def weekday(moment) -> str:
    return moment.strftime("%A")
