"""A small, safe expression language for ``filter`` and ``add_field``, evaluated per batch.

Written like Python, parsed with :mod:`ast` and checked against a whitelist (no
attribute access beyond fields, no calls but the functions below, no imports), then
evaluated over a whole record batch with Arrow kernels: one pass per operator, never a
Python call per row.

::

    op == 'd'
    table in ('orders', 'refunds') and after.status == 'deleted'
    after.amount >= 100 and before.amount < 100          # DECIMAL text compares as a number
    after['first name'] is not None
    endswith(lower(after.email), '@example.com')
    db + '.' + table                                     # add_field: text
    after.price * after.qty                              # add_field: a number

Names: the envelope fields (``op``, ``db``, ``table``, ``ts_ms``, ``server_id``,
``gtid``, ``txn_id``, ``file``, ``pos``, ``row``, ``seq``, ``query``) and any extra
column a transform added; ``before.X``, ``after.X``, ``key.X`` (or ``after['X']``) are
fields of the row images. Literals: strings, numbers, ``None``/``null``,
``True``/``true``, ``False``/``false``, tuples or lists of literals after ``in``.
Operators: ``== != < <= > >= in not in is None is not None and or not + - * /``.
Functions: ``lower upper len str startswith endswith contains coalesce``.

Typing: a comparison with a number literal compares numbers (DECIMAL strings are
numbers; a value that is not one matches nothing); with a string literal compares
text (a number's JSON text); ``==``/``!=`` with None test for null. A missing field
is null; any comparison with null is false (``!=`` included), as in SQL.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import orjson
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["Expression", "parse", "ExpressionError", "IMAGES", "FIELDS"]

IMAGES = ("before", "after", "key")
FIELDS = ("op", "db", "table", "ts_ms", "server_id", "gtid", "txn_id", "file", "pos", "row",
          "seq", "query", "moved_key")
_CONSTANTS = {"null": None, "true": True, "false": False, "None": None, "True": True,
              "False": False}
_FUNCTIONS = ("lower", "upper", "len", "str", "startswith", "endswith", "contains", "coalesce")
_NUMBER = r"^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$"


class ExpressionError(ValueError):
    """An expression that is not in the language (raised when it is parsed)."""


# --- parsing -----------------------------------------------------------------


@dataclass(frozen=True)
class Ref:
    """A field: an envelope column (``image`` None) or a field of a row image."""

    image: str | None
    name: str


@dataclass(frozen=True)
class Expression:
    """A parsed expression: ``refs`` lists the fields it reads."""

    text: str
    tree: Any
    refs: tuple[Ref, ...]

    def images(self) -> set[str]:
        """The row images the expression reads (``after`` ...): they must be parsed."""
        return {r.image for r in self.refs if r.image is not None}


def parse(text: str) -> Expression:
    """Parse and check ``text``; raises ExpressionError naming what is not allowed."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as err:
        raise ExpressionError(f"not a valid expression: {err.msg} at column {err.offset}") from None
    refs: list[Ref] = []
    node = _check(tree, refs)
    return Expression(text, node, tuple(dict.fromkeys(refs)))


def _check(node: ast.AST, refs: list[Ref]) -> Any:
    """The node rebuilt as plain tuples, every part checked against the whitelist."""
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, (str, int, float, bool, type(None))):
            raise ExpressionError(f"literal {node.value!r} is not allowed")
        return ("lit", node.value)
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return ("lit", _CONSTANTS[node.id])
        if node.id in IMAGES:
            raise ExpressionError(f"'{node.id}' is a row image: name one of its fields, "
                                  f"such as {node.id}.id")
        refs.append(Ref(None, node.id))
        return ("ref", refs[-1])
    if isinstance(node, (ast.Attribute, ast.Subscript)):
        return _image_field(node, refs)
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_check(e, refs) for e in node.elts]
        if any(i[0] != "lit" for i in items):
            raise ExpressionError("a list may hold literals only")
        return ("lits", tuple(i[1] for i in items))
    if isinstance(node, ast.BoolOp):
        return ("and" if isinstance(node.op, ast.And) else "or",
                tuple(_check(v, refs) for v in node.values))
    if isinstance(node, ast.UnaryOp):
        return _unary(node, refs)
    if isinstance(node, ast.Compare):
        return _compare(node, refs)
    if isinstance(node, ast.BinOp):
        op = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}.get(
            type(node.op))
        if op is None:
            raise ExpressionError(f"operator {type(node.op).__name__} is not allowed")
        return ("bin", op, _check(node.left, refs), _check(node.right, refs))
    if isinstance(node, ast.Call):
        return _call(node, refs)
    raise ExpressionError(f"{type(node).__name__} is not allowed in an expression")


def _image_field(node: ast.Attribute | ast.Subscript, refs: list[Ref]) -> Any:
    base = node.value
    if not (isinstance(base, ast.Name) and base.id in IMAGES):
        raise ExpressionError("fields are written before.X, after.X or key.X")
    if isinstance(node, ast.Attribute):
        name = node.attr
    elif isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        name = node.slice.value
    else:
        raise ExpressionError(f"write {base.id}['column name'] with a string")
    refs.append(Ref(base.id, name))
    return ("ref", refs[-1])


def _unary(node: ast.UnaryOp, refs: list[Ref]) -> Any:
    operand = _check(node.operand, refs)
    if isinstance(node.op, ast.Not):
        return ("not", operand)
    if isinstance(node.op, (ast.USub, ast.UAdd)) and operand[0] == "lit" \
            and isinstance(operand[1], (int, float)):
        return ("lit", -operand[1] if isinstance(node.op, ast.USub) else operand[1])
    if isinstance(node.op, ast.USub):
        return ("bin", "-", ("lit", 0), operand)
    raise ExpressionError(f"operator {type(node.op).__name__} is not allowed")


_CMP = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
        ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}


def _compare(node: ast.Compare, refs: list[Ref]) -> Any:
    parts, left = [], _check(node.left, refs)
    for op, right_node in zip(node.ops, node.comparators):
        name = _CMP[type(op)]
        right = _check(right_node, refs)
        if name in ("is", "is not") and right != ("lit", None):
            raise ExpressionError("'is' and 'is not' compare with None only")
        if name in ("in", "not in") and right[0] != "lits":
            raise ExpressionError("'in' needs a list of literals, such as ('a', 'b')")
        parts.append(("cmp", name, left, right))
        left = right
    return parts[0] if len(parts) == 1 else ("and", tuple(parts))


def _call(node: ast.Call, refs: list[Ref]) -> Any:
    if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
        raise ExpressionError(f"functions allowed: {', '.join(_FUNCTIONS)}")
    if node.keywords:
        raise ExpressionError("functions take positional arguments only")
    args = tuple(_check(a, refs) for a in node.args)
    wanted = {"startswith": 2, "endswith": 2, "contains": 2}.get(node.func.id, 1)
    if node.func.id != "coalesce" and len(args) != wanted:
        raise ExpressionError(f"{node.func.id}() takes {wanted} argument(s)")
    if node.func.id in ("startswith", "endswith", "contains") and (
            args[1][0] != "lit" or not isinstance(args[1][1], str)):
        raise ExpressionError(f"the second argument of {node.func.id}() is a string literal")
    return ("call", node.func.id, args)


# --- evaluation --------------------------------------------------------------


Lookup = Callable[[Ref], "pa.Array | list"]


class _Values:
    """One operand over the batch: an Arrow array, or Python values of an image field."""

    def __init__(self, data: pa.Array | list) -> None:
        self.data = data

    def _list(self) -> list:
        return self.data.to_pylist() if isinstance(self.data, (pa.Array, pa.ChunkedArray)) \
            else self.data

    def text(self) -> pa.Array:
        d = self.data
        if isinstance(d, (pa.Array, pa.ChunkedArray)):
            if pa.types.is_string(d.type) or pa.types.is_large_string(d.type):
                return d
            if pa.types.is_boolean(d.type):
                return pc.if_else(d, "true", "false")
            return pc.cast(d, pa.string())
        return pa.array([_json_text(v) for v in d], pa.string())

    def number(self) -> pa.Array:
        d = self.data
        if isinstance(d, (pa.Array, pa.ChunkedArray)):
            if pa.types.is_integer(d.type) or pa.types.is_floating(d.type):
                return d
            if pa.types.is_decimal(d.type):
                return pc.cast(d, pa.float64())
            if pa.types.is_string(d.type):
                ok = pc.fill_null(pc.match_substring_regex(d, _NUMBER), False)
                return pc.cast(pc.if_else(ok, d, None), pa.float64())
            return pa.nulls(len(d), pa.float64())
        return _numbers(d)

    def boolean(self) -> pa.Array:
        d = self.data
        if isinstance(d, (pa.Array, pa.ChunkedArray)) and pa.types.is_boolean(d.type):
            return d
        return pa.array([_truthy(v) for v in self._list()], pa.bool_())

    def is_null(self) -> pa.Array:
        d = self.data
        if isinstance(d, (pa.Array, pa.ChunkedArray)):
            return pc.is_null(d)
        return pa.array([v is None for v in d], pa.bool_())

    def python(self) -> list:
        return self._list()


def _json_text(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    return orjson.dumps(v).decode()


def _numbers(values: Sequence) -> pa.Array:
    """Python values -> int64 when every one is an int that fits, else float64; text
    that is not a number becomes null."""
    out: list = []
    ints = True
    for v in values:
        if v is None or isinstance(v, bool):
            out.append(None)
        elif isinstance(v, int):
            out.append(v)
            ints = ints and -(1 << 63) <= v < (1 << 63)
        elif isinstance(v, float):
            out.append(v)
            ints = False
        elif isinstance(v, str):
            try:
                out.append(float(v))
            except ValueError:
                out.append(None)
            ints = False
        else:
            out.append(None)
    if ints:
        return pa.array(out, pa.int64())
    return pa.array([None if v is None else float(v) for v in out], pa.float64())


def _truthy(v: Any) -> bool:
    return bool(v) and v != "0"


def evaluate(expr: Expression, lookup: Lookup, length: int) -> pa.Array:
    """The expression over a batch of ``length`` rows as a boolean array (null -> false)."""
    result = _eval(expr.tree, lookup, length)
    mask = result.boolean() if isinstance(result, _Values) else _broadcast(result, length)
    if not pa.types.is_boolean(mask.type):
        mask = _Values(mask).boolean()
    return pc.fill_null(mask, False)


def evaluate_values(expr: Expression, lookup: Lookup, length: int) -> list:
    """The expression's value per row, as Python values (for ``add_field``)."""
    result = _eval(expr.tree, lookup, length)
    if isinstance(result, _Values):
        return result.python()
    return [result] * length


def _broadcast(value: Any, length: int) -> pa.Array:
    return pa.array([bool(value)] * length, pa.bool_())


def _eval(node: Any, lookup: Lookup, n: int) -> Any:
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "ref":
        return _Values(lookup(node[1]))
    if kind == "and" or kind == "or":
        fn = pc.and_kleene if kind == "and" else pc.or_kleene
        parts = [_as_mask(_eval(p, lookup, n), n) for p in node[1]]
        out = parts[0]
        for p in parts[1:]:
            out = fn(out, p)
        return _Values(out)
    if kind == "not":
        return _Values(pc.invert(_as_mask(_eval(node[1], lookup, n), n)))
    if kind == "cmp":
        return _Values(_compare_values(node[1], _eval(node[2], lookup, n),
                                       _eval(node[3], lookup, n) if node[3][0] != "lits"
                                       else node[3], n))
    if kind == "bin":
        return _arith(node[1], _eval(node[2], lookup, n), _eval(node[3], lookup, n), n)
    if kind == "call":
        return _function(node[1], [_eval(a, lookup, n) for a in node[2]], n)
    raise AssertionError(kind)


def _as_mask(v: Any, n: int) -> pa.Array:
    if isinstance(v, _Values):
        return pc.fill_null(v.boolean(), False)
    return _broadcast(v, n)


def _operand(v: Any, n: int) -> _Values:
    return v if isinstance(v, _Values) else _Values(pa.array([v] * n))


_ARROW_CMP = {"==": pc.equal, "!=": pc.not_equal, "<": pc.less, "<=": pc.less_equal,
              ">": pc.greater, ">=": pc.greater_equal}


def _compare_values(op: str, left: Any, right: Any, n: int) -> pa.Array:
    if op in ("is", "is not") or (right is None and op in ("==", "!=")):
        nulls = _operand(left, n).is_null()
        return nulls if op in ("is", "==") else pc.invert(nulls)
    if op in ("in", "not in"):
        values = right[1]
        lhs = _operand(left, n)
        if all(isinstance(v, str) for v in values):
            found = pc.is_in(lhs.text(), value_set=pa.array(values, pa.string()))
        else:
            nums = lhs.number()
            found = pc.is_in(nums, value_set=pa.array([float(v) for v in values], nums.type)
                             if pa.types.is_floating(nums.type)
                             else pa.array(values).cast(nums.type, safe=False))
        found = pc.if_else(lhs.is_null(), None, found)
        return found if op == "in" else pc.invert(found)
    a, b = _operand(left, n), _operand(right, n)
    if isinstance(right, str) or isinstance(left, str):
        return _ARROW_CMP[op](a.text(), b.text())
    if isinstance(right, bool) or isinstance(left, bool):
        return _ARROW_CMP[op](a.boolean(), b.boolean())
    if isinstance(right, (int, float)) or isinstance(left, (int, float)):
        return _ARROW_CMP[op](*_same_numbers(a.number(), b.number()))
    # two fields: per row, as numbers where both are numbers (DECIMAL text included),
    # else as text
    x, y = _same_numbers(a.number(), b.number())
    both = pc.and_(pc.is_valid(x), pc.is_valid(y))
    return pc.if_else(both, _ARROW_CMP[op](x, y), _ARROW_CMP[op](a.text(), b.text()))


def _same_numbers(x: pa.Array, y: pa.Array) -> tuple[pa.Array, pa.Array]:
    if x.type == y.type:
        return x, y
    return pc.cast(x, pa.float64()), pc.cast(y, pa.float64())


def _arith(op: str, left: Any, right: Any, n: int) -> _Values:
    a, b = _operand(left, n), _operand(right, n)
    if op == "+" and (isinstance(left, str) or isinstance(right, str) or
                      _is_text(a.data) or _is_text(b.data)):
        return _Values(pc.binary_join_element_wise(a.text(), b.text(), ""))
    x, y = _same_numbers(a.number(), b.number())
    if op == "/":
        x, y = pc.cast(x, pa.float64()), pc.cast(y, pa.float64())
        y = pc.if_else(pc.equal(y, 0), None, y)
        return _Values(pc.divide(x, y))
    fn = {"+": pc.add, "-": pc.subtract, "*": pc.multiply}[op]
    return _Values(fn(x, y))


def _is_text(d: Any) -> bool:
    if isinstance(d, (pa.Array, pa.ChunkedArray)):
        return pa.types.is_string(d.type)
    return any(isinstance(v, str) for v in d) and not any(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in d)


def _function(name: str, args: list, n: int) -> _Values:
    vals = [_operand(a, n) for a in args]
    if name == "lower":
        return _Values(pc.utf8_lower(vals[0].text()))
    if name == "upper":
        return _Values(pc.utf8_upper(vals[0].text()))
    if name == "len":
        return _Values(pc.utf8_length(vals[0].text()))
    if name == "str":
        return _Values(vals[0].text())
    if name == "coalesce":
        return _Values(pc.coalesce(*[v.text() for v in vals]))
    pattern = args[1]
    fn = {"startswith": pc.starts_with, "endswith": pc.ends_with,
          "contains": pc.match_substring}[name]
    return _Values(fn(vals[0].text(), pattern=pattern))
