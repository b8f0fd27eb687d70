"""A small JSON-schema subset for tool parameters: builders and a validator.

Every tool declares its parameters with `object_schema` and the property
builders `string`, `number`, `boolean` and `array`; each writes its keys in one
order (``type``, the bounds, ``description``), which is the order the model
reads them in.

Supported keywords: ``type`` (a name or a list of names: object, string,
integer, number, boolean, array, null), ``required``, ``properties``,
``additionalProperties`` (``false`` or a schema), ``items``, ``minItems``,
``maxItems``, ``minimum``, ``maximum``, ``exclusiveMinimum``,
``exclusiveMaximum``, ``minLength``, ``maxLength``, ``enum``. Anything else
(``description``, ``default``...) is ignored.

Strictness beyond JSON schema, on purpose:

- ``integer`` and ``number`` never accept booleans; ``integer`` does not accept
  ``3.0``; numbers must be finite (Python's json accepts ``NaN``/``Infinity``).
- Every string anywhere in the parameters is limited to `MAX_STRING` characters
  unless its schema sets ``maxLength`` (the write tools allow 10 MiB that way).

`validate` returns the first problem as one sentence a user can act on, or None.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Sequence
from typing import Any

MAX_STRING = 1 << 20  # 1 MiB, in characters
MAX_CONTENT = 10 << 20  # what write_file / replace_in_file allow via maxLength


def object_schema(properties: dict[str, Any], required: Sequence[str] = ()) -> dict[str, Any]:
    """A tool's parameters: ``properties`` in the order given, the ``required``
    ones, and no other key allowed."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


def string(
    description: str | None = None,
    *,
    min_length: int | None = None,
    max_length: int | None = None,
    enum: Sequence[str] | None = None,
) -> dict[str, Any]:
    """A string property; ``min_length=1`` refuses the empty string, and without
    ``max_length`` the `MAX_STRING` guard applies."""
    options = None if enum is None else list(enum)
    return _property(
        "string", description, minLength=min_length, maxLength=max_length, enum=options
    )


def number(
    description: str,
    *,
    minimum: float | None = None,
    exclusive_minimum: float | None = None,
) -> dict[str, Any]:
    """A number property (an integer or a finite float)."""
    return _property("number", description, minimum=minimum, exclusiveMinimum=exclusive_minimum)


def boolean(description: str) -> dict[str, Any]:
    """A boolean property."""
    return _property("boolean", description)


def array(
    items: dict[str, Any],
    description: str | None = None,
    *,
    min_items: int | None = None,
    max_items: int | None = None,
) -> dict[str, Any]:
    """An array property whose every item fits ``items``."""
    return _property("array", description, items=items, minItems=min_items, maxItems=max_items)


def _property(kind: str, description: str | None, **keywords: Any) -> dict[str, Any]:
    """``{"type": kind, <the keywords given a value>, "description": ...}``."""
    schema: dict[str, Any] = {"type": kind}
    schema.update((key, value) for key, value in keywords.items() if value is not None)
    if description is not None:
        schema["description"] = description
    return schema


_PLURAL = {
    "object": "objects",
    "string": "strings",
    "integer": "integers",
    "number": "numbers",
    "boolean": "booleans",
    "array": "arrays",
    "null": "nulls",
}


def validate(schema: dict[str, Any], params: Any) -> str | None:
    """Check ``params`` (the decoded JSON of a tool call) against ``schema``."""
    if not isinstance(params, dict):
        return f"parameters must be a JSON object, got {type_of(params)}"
    return _check(params, schema or {}, "")


_JSON_TYPES: tuple[tuple[Any, str], ...] = (
    (type(None), "null"),
    (bool, "boolean"),  # before int: a bool is an int to Python
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    ((list, tuple), "array"),
    (dict, "object"),
)


_TYPE_NAMES = frozenset(name for _, name in _JSON_TYPES)


def _json_type(value: Any) -> str | None:
    """The JSON type name of a decoded value; None for anything JSON has not."""
    return next((name for kind, name in _JSON_TYPES if isinstance(value, kind)), None)


def type_of(value: Any) -> str:
    """The JSON type name of a decoded value (else its Python type's name)."""
    return _json_type(value) or type(value).__name__


def _is(value: Any, name: str) -> bool:
    """Is ``value`` of JSON type ``name`` (an integer is a number too)?"""
    if name not in _TYPE_NAMES:
        raise ValueError(f"schema error: unknown type {name!r}")
    actual = _json_type(value)
    return actual == name or (name == "number" and actual == "integer")


def _types(schema: dict[str, Any]) -> list[str]:
    t = schema.get("type")
    if t is None:
        return []
    return [t] if isinstance(t, str) else list(t)


def describe(schema: dict[str, Any]) -> str:
    """Human wording of what a schema expects: "array of strings", "string or null"."""
    words = []
    for name in _types(schema):
        items = schema.get("items")
        if name == "array" and isinstance(items, dict) and len(_types(items)) == 1:
            words.append(f"array of {_PLURAL.get(_types(items)[0], _types(items)[0])}")
        else:
            words.append(name)
    return " or ".join(words) if words else "any value"


def _where(path: str) -> str:
    return f'parameter "{path}": ' if path else "parameters: "


def _show(value: Any) -> str:
    if isinstance(value, str) and len(value) > 60:
        value = value[:57] + "..."
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _size(n: int) -> str:
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n} characters = {n >> 20} MiB"
    return f"{n} characters"


def _same(a: Any, b: Any) -> bool:
    """Equality that keeps JSON types apart (True is not 1, "1" is not 1)."""
    ta, tb = type_of(a), type_of(b)
    numeric = ("integer", "number")
    if ta != tb and not (ta in numeric and tb in numeric):
        return False
    return bool(a == b)


def _check(value: Any, schema: dict[str, Any], path: str) -> str | None:
    types = _types(schema)
    if types and not any(_is(value, t) for t in types):
        return f"{_where(path)}expected {describe(schema)}, got {type_of(value)}"

    enum = schema.get("enum")
    if enum is not None and not any(_same(value, option) for option in enum):
        options = ", ".join(_show(o) for o in enum)
        return f"{_where(path)}must be one of {options}; got {_show(value)}"

    if isinstance(value, str):
        return _check_size(len(value), schema, path, "string")
    if _is(value, "number"):
        return _check_number(value, schema, path)
    if isinstance(value, (list, tuple)):
        return _check_array(value, schema, path)
    if isinstance(value, dict):
        return _check_object(value, schema, path)
    return None


# The size checks of strings and arrays: their keywords, and what is said when
# one is broken (a minimum of 1 is said as "not empty").
_SIZES = {
    "string": (
        ("minLength", "maxLength", MAX_STRING),
        "must not be empty",
        "must be at least {bound} characters long, got {n}",
        "is too long: {n} characters (limit {limit})",
    ),
    "array": (
        ("minItems", "maxItems", None),
        "must not be an empty array",
        "must have at least {bound} items, got {n}",
        "must have at most {bound} items, got {n}",
    ),
}


def _check_size(n: int, schema: dict[str, Any], path: str, kind: str) -> str | None:
    (low, high, default_high), empty, too_few, too_many = _SIZES[kind]
    bound = schema.get(low)
    if bound is not None and n < bound:
        return _where(path) + (empty if bound == 1 else too_few.format(bound=bound, n=n))
    bound = schema.get(high, default_high)
    if bound is not None and n > bound:
        return _where(path) + too_many.format(bound=bound, n=n, limit=_size(bound))
    return None


def _check_number(value: float, schema: dict[str, Any], path: str) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return f"{_where(path)}must be a finite number, got {_show(value)}"
    checks = (
        ("minimum", lambda v, b: v >= b, ">="),
        ("maximum", lambda v, b: v <= b, "<="),
        ("exclusiveMinimum", lambda v, b: v > b, ">"),
        ("exclusiveMaximum", lambda v, b: v < b, "<"),
    )
    for key, ok, op in checks:
        bound = schema.get(key)
        if bound is not None and not isinstance(bound, bool) and not ok(value, bound):
            return f"{_where(path)}must be {op} {_show(bound)}, got {_show(value)}"
    return None


def _check_array(value: Any, schema: dict[str, Any], path: str) -> str | None:
    problem = _check_size(len(value), schema, path, "array")
    if problem:
        return problem
    items = schema.get("items")
    item_schema = items if isinstance(items, dict) else {}
    base = path or "parameters"
    for i, item in enumerate(value):
        err = _check(item, item_schema, f"{base}[{i}]")
        if err:
            return err
    return None


def _check_object(value: dict[str, Any], schema: dict[str, Any], path: str) -> str | None:
    props: dict[str, Any] = schema.get("properties") or {}
    extra = schema.get("additionalProperties", True)
    prefix = f"{path}." if path else ""

    if extra is False:
        for key in value:
            if key not in props:
                hint = _suggest(str(key), list(props))
                known = ", ".join(props) if props else "none"
                why = f'did you mean "{prefix}{hint[0]}"? ' if hint else ""
                return f'unknown parameter "{prefix}{key}" ({why}expected: {known})'

    for key in schema.get("required") or ():
        if key not in value:
            return f'missing required parameter "{prefix}{key}"'

    for key, item in value.items():
        if key in props:
            sub = props[key] if isinstance(props[key], dict) else {}
        elif isinstance(extra, dict):
            sub = extra
        else:
            sub = {}  # still walked: the string size guard applies everywhere
        err = _check(item, sub, f"{prefix}{key}")
        if err:
            return err
    return None


def _suggest(key: str, known: list[str]) -> list[str]:
    """The known key the user probably meant: an abbreviation ("cmd" for
    "command", "timeout" for "timeout_seconds") first, else the closest spelling."""
    lowered = key.lower()
    abbreviations = [k for k in known if _is_subsequence(lowered, k.lower())]
    if abbreviations:
        return [min(abbreviations, key=len)]
    return difflib.get_close_matches(key, known, n=1)


def _is_subsequence(short: str, long: str) -> bool:
    it = iter(long)
    return bool(short) and all(ch in it for ch in short)
