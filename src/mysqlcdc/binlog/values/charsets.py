"""MySQL/MariaDB collation ids and charset names -> Python codecs.

``None`` means binary: the value is bytes and goes out base64-encoded. MySQL's
``latin1`` is Windows-1252 with the five bytes cp1252 leaves undefined mapped to
the C1 controls of the same number; the ``mysqlcdc-latin1`` error handler does
that mapping so decoding never fails on them.
"""

from __future__ import annotations

import codecs

__all__ = ["codec_for_collation", "codec_for_charset", "decode_text", "BINARY_COLLATION"]

BINARY_COLLATION = 63


def _c1_passthrough(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    return "".join(chr(b) for b in exc.object[exc.start:exc.end]), exc.end


codecs.register_error("mysqlcdc-latin1", _c1_passthrough)


def _sjis_decode(data: bytes, errors: str = "strict") -> tuple[str, int]:
    # The server's sjis maps 0x815F to U+005C (backslash); Python's shift_jis maps it
    # to U+FF3C, which no other sjis sequence decodes to, so replacing it is exact.
    return codecs.decode(bytes(data), "shift_jis", errors).replace("\uff3c", "\\"), len(data)


def _sjis_search(name: str):
    if name != "mysqlcdc_sjis":
        return None
    base = codecs.lookup("shift_jis")
    return codecs.CodecInfo(base.encode, _sjis_decode, name="mysqlcdc-sjis")


codecs.register(_sjis_search)

# charset name -> Python codec (None: binary). Charsets without a Python codec
# (dec8, hp8, swe7, keybcs2, armscii8, geostd8) decode as latin-1: exact for
# ASCII, approximate above.
CHARSET_CODECS: dict[str, str | None] = {
    "big5": "big5", "dec8": "latin-1", "cp850": "cp850", "hp8": "latin-1", "koi8r": "koi8_r",
    "latin1": "cp1252", "latin2": "iso8859_2", "swe7": "latin-1", "ascii": "ascii",
    "ujis": "euc_jp", "sjis": "mysqlcdc-sjis", "hebrew": "iso8859_8", "tis620": "tis_620",
    "euckr": "euc_kr", "koi8u": "koi8_u", "gb2312": "gb2312", "greek": "iso8859_7",
    "cp1250": "cp1250", "gbk": "gbk", "latin5": "iso8859_9", "armscii8": "latin-1",
    "utf8": "utf-8", "utf8mb3": "utf-8", "utf8mb4": "utf-8", "ucs2": "utf-16-be",
    "cp866": "cp866", "keybcs2": "latin-1", "macce": "mac_latin2", "macroman": "mac_roman",
    "cp852": "cp852", "latin7": "iso8859_13", "cp1251": "cp1251", "utf16": "utf-16-be",
    "utf16le": "utf-16-le", "cp1256": "cp1256", "cp1257": "cp1257", "utf32": "utf-32-be",
    "binary": None, "geostd8": "latin-1", "cp932": "cp932", "eucjpms": "euc_jp",
    "gb18030": "gb18030",
}

# First collation ids of each charset in MySQL/MariaDB (ids 1-99 listed one by one).
_SMALL_IDS: dict[int, str] = {}
for _name, _ids in {
    "big5": (1, 84), "latin2": (2, 9, 21, 27, 77), "dec8": (3, 69), "cp850": (4, 80),
    "latin1": (5, 8, 15, 31, 47, 48, 49, 94), "hp8": (6, 72), "koi8r": (7, 74),
    "swe7": (10, 82), "ascii": (11, 65), "ujis": (12, 91), "sjis": (13, 88),
    "cp1251": (14, 23, 50, 51, 52), "hebrew": (16, 71), "tis620": (18, 89),
    "euckr": (19, 85), "latin7": (20, 41, 42, 79), "koi8u": (22, 75), "gb2312": (24, 86),
    "greek": (25, 70), "cp1250": (26, 34, 44, 66, 99), "gbk": (28, 87),
    "cp1257": (29, 58, 59), "latin5": (30, 78), "armscii8": (32, 64),
    "utf8mb3": (33, 76, 83), "ucs2": (35, 90), "cp866": (36, 68), "keybcs2": (37, 73),
    "macce": (38, 43), "macroman": (39, 53), "cp852": (40, 81), "utf8mb4": (45, 46),
    "utf16": (54, 55), "utf16le": (56, 62), "cp1256": (57, 67), "utf32": (60, 61),
    "binary": (63,), "geostd8": (92, 93), "cp932": (95, 96), "eucjpms": (97, 98),
}.items():
    for _i in _ids:
        _SMALL_IDS[_i] = _name

# Ranges of the UCA and later collations: (first, last, charset).
_RANGES: tuple[tuple[int, int, str], ...] = (
    (101, 124, "utf16"), (128, 151, "ucs2"), (159, 159, "ucs2"), (160, 183, "utf32"),
    (192, 215, "utf8mb3"), (223, 223, "utf8mb3"), (224, 247, "utf8mb4"),
    (248, 250, "gb18030"), (255, 323, "utf8mb4"),          # MySQL 8 _0900_ collations
    (576, 607, "utf8mb3"), (608, 639, "utf8mb4"),          # MariaDB extra UCA ids
    (640, 671, "ucs2"), (672, 703, "utf16"), (736, 767, "utf32"),
    (2048, 2303, "utf8mb3"), (2304, 2559, "utf8mb4"),      # MariaDB uca1400 ids
    (2560, 2815, "ucs2"), (2816, 3071, "utf16"), (3072, 3327, "utf32"),
)


def charset_of_collation(collation_id: int) -> str | None:
    """Charset name for a collation id, or None when unknown."""
    name = _SMALL_IDS.get(collation_id)
    if name is not None:
        return name
    if 1024 <= collation_id < 2048:                     # MariaDB _nopad_ variants
        return charset_of_collation(collation_id - 1024)
    for first, last, cs in _RANGES:
        if first <= collation_id <= last:
            return cs
    return None


def codec_for_collation(collation_id: int, default: str | None = "utf-8") -> str | None:
    """Python codec for a collation id; ``default`` when the id is unknown."""
    cs = charset_of_collation(collation_id)
    if cs is None:
        return default
    return CHARSET_CODECS[cs]


def codec_for_charset(name: str | None, default: str | None = "utf-8") -> str | None:
    """Python codec for a charset name such as ``utf8mb4`` or ``binary``."""
    if not name:
        return default
    return CHARSET_CODECS.get(name.lower(), default)


def error_mode(codec: str) -> str:
    """The decode error handler for a codec: C1 passthrough for latin1, else visible escapes."""
    return "mysqlcdc-latin1" if codec == "cp1252" else "backslashreplace"


def decode_text(raw: bytes, codec: str) -> str:
    return raw.decode(codec, error_mode(codec))
