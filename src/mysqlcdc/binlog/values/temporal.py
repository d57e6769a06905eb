"""Temporal column encodings -> the envelope's text forms.

DATE ``YYYY-MM-DD``; DATETIME ``YYYY-MM-DD HH:MM:SS[.f]``; TIMESTAMP
``YYYY-MM-DDTHH:MM:SS[.f]Z`` (UTC); TIME ``[-]HH:MM:SS[.f]`` with hours beyond
24 kept. The fraction has exactly ``fsp`` digits. Zero and invalid dates come
out as the literal MySQL shows (``0000-00-00``), never as an error.

Formatting is memoised per date and per time of day: row decoding calls these
for every value, and a table rarely holds more than a few thousand distinct days.
"""

from __future__ import annotations

from datetime import date

__all__ = [
    "format_date", "format_date_packed", "format_datetime2", "format_timestamp",
    "format_time_packed", "format_old_datetime", "format_old_time", "time2_packed",
    "frac_bytes", "FRAC_SCALE", "ZERO_TIMESTAMP",
]

_EPOCH_ORDINAL = 719163  # date(1970, 1, 1).toordinal()
_CACHE_LIMIT = 200_000
ZERO_TIMESTAMP = "0000-00-00 00:00:00"

# microseconds -> fraction digits for fsp 0..6
FRAC_SCALE = (1_000_000, 100_000, 10_000, 1_000, 100, 10, 1)
_FRAC_FMT = ("", ".{:01d}", ".{:02d}", ".{:03d}", ".{:04d}", ".{:05d}", ".{:06d}")

_ymd_cache: dict[int, str] = {}
_hms_cache: dict[int, str] = {}
_day_cache: dict[int, str] = {}
_epoch_day_cache: dict[int, str] = {}
_sod_cache: dict[int, str] = {}


def frac_bytes(fsp: int) -> int:
    """Bytes of the fractional part stored for TIME2/DATETIME2/TIMESTAMP2(fsp)."""
    return (fsp + 1) // 2


def format_fraction(us: int, fsp: int) -> str:
    """``.ffff`` with exactly fsp digits (empty for fsp 0)."""
    if not fsp:
        return ""
    return _FRAC_FMT[fsp].format(us // FRAC_SCALE[fsp])


def _ymd(year: int, month: int, day: int) -> str:
    return f"{year:04d}-{month:02d}-{day:02d}"


def format_date(v: int) -> str:
    """3-byte DATE: day in bits 0-4, month 5-8, year 9-23."""
    s = _ymd_cache.get(v)
    if s is None:
        if len(_ymd_cache) > _CACHE_LIMIT:
            _ymd_cache.clear()
        s = _ymd_cache[v] = _ymd(v >> 9, (v >> 5) & 15, v & 31)
    return s


def format_date_packed(ymd: int) -> str:
    """DATETIME2-style year*13+month (bits 5+) and day (bits 0-4)."""
    s = _day_cache.get(ymd)
    if s is None:
        if len(_day_cache) > _CACHE_LIMIT:
            _day_cache.clear()
        ym = ymd >> 5
        s = _day_cache[ymd] = _ymd(ym // 13, ym % 13, ymd & 31)
    return s


def format_hms(hms: int) -> str:
    """Packed hour<<12 | minute<<6 | second -> ``HH:MM:SS``."""
    s = _hms_cache.get(hms)
    if s is None:
        if len(_hms_cache) > _CACHE_LIMIT:
            _hms_cache.clear()
        s = _hms_cache[hms] = f"{hms >> 12:02d}:{(hms >> 6) & 63:02d}:{hms & 63:02d}"
    return s


def format_datetime2(intpart: int, us: int, fsp: int) -> str:
    """DATETIME2: intpart = stored 40-bit value minus 0x8000000000."""
    text = format_date_packed(intpart >> 17) + " " + format_hms(intpart & 0x1FFFF)
    return text + format_fraction(us, fsp) if fsp else text


def format_timestamp(secs: int, us: int, fsp: int) -> str:
    """Seconds since the epoch -> UTC ``YYYY-MM-DDTHH:MM:SS[.f]Z``; 0 is the zero date."""
    if secs == 0 and us == 0:
        return ZERO_TIMESTAMP + format_fraction(0, fsp)
    days, rem = divmod(secs, 86400)
    return format_epoch_day(days) + format_second_of_day(rem) + format_fraction(us, fsp) + "Z"


def format_epoch_day(days: int) -> str:
    """Days since 1970-01-01 -> ``YYYY-MM-DDT`` (the date part of a TIMESTAMP)."""
    s = _epoch_day_cache.get(days)
    if s is None:
        if len(_epoch_day_cache) > _CACHE_LIMIT:
            _epoch_day_cache.clear()
        s = _epoch_day_cache[days] = date.fromordinal(_EPOCH_ORDINAL + days).isoformat() + "T"
    return s


def format_second_of_day(sec: int) -> str:
    """Seconds since midnight -> ``HH:MM:SS`` (at most 86400 entries cached)."""
    s = _sod_cache.get(sec)
    if s is None:
        h, rem = divmod(sec, 3600)
        s = _sod_cache[sec] = f"{h:02d}:{rem // 60:02d}:{rem % 60:02d}"
    return s


def time2_packed(raw: bytes, fsp: int) -> int:
    """TIME2 bytes -> MySQL's packed signed value (hms << 24) + microseconds."""
    intpart = int.from_bytes(raw[:3], "big") - 0x800000
    if fsp <= 0:
        return intpart << 24
    if fsp <= 2:
        frac = raw[3]
        if intpart < 0 and frac:
            intpart += 1
            frac -= 0x100
        return (intpart << 24) + frac * 10000
    if fsp <= 4:
        frac = int.from_bytes(raw[3:5], "big")
        if intpart < 0 and frac:
            intpart += 1
            frac -= 0x10000
        return (intpart << 24) + frac * 100
    return int.from_bytes(raw[:6], "big") - 0x800000000000


def format_time_packed(packed: int, fsp: int) -> str:
    """Packed TIME value -> ``[-]HH:MM:SS[.f]`` (hours may exceed 24)."""
    sign = ""
    if packed < 0:
        sign, packed = "-", -packed
    hms, us = packed >> 24, packed & 0xFFFFFF
    h = (hms >> 12) & 0x3FF
    text = f"{sign}{h:02d}:{(hms >> 6) & 63:02d}:{hms & 63:02d}"
    return text + format_fraction(us, fsp) if fsp else text


def format_old_datetime(v: int) -> str:
    """Pre-5.6 DATETIME: the decimal number YYYYMMDDhhmmss."""
    d, t = divmod(v, 1_000_000)
    return (f"{d // 10000:04d}-{d // 100 % 100:02d}-{d % 100:02d} "
            f"{t // 10000:02d}:{t // 100 % 100:02d}:{t % 100:02d}")


def format_old_time(v: int) -> str:
    """Pre-5.6 TIME: the signed decimal number HHMMSS."""
    sign = "-" if v < 0 else ""
    v = abs(v)
    return f"{sign}{v // 10000:02d}:{v // 100 % 100:02d}:{v % 100:02d}"
