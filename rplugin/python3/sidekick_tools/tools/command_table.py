"""The table of safe forms in force, from the user's configuration.

- ``auto_accept.safe_commands``: names. A name the table knows enables its
  built-in form (`command_forms.BUILTIN_FORMS`); any other entry
  (``"make test"``) approves exactly those words, with no option or operand
  added.
- ``auto_accept.command_forms``: name -> form declared by the user (replaces a
  built-in one of the same name and is enabled by being declared), or ``false``
  to disable a name.

Entries that cannot be used approve nothing and are described in
`Table.problems`, which the host shows the user.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import shell_words
from .command_forms import (
    BUILTIN_FORMS,
    FORBIDDEN_OPTIONS,
    NEVER_SAFE,
    OPERAND_KINDS,
    Form,
)

_FORM_FIELDS = (
    "flags",
    "values",
    "optional_values",
    "path_values",
    "operands",
    "max_operands",
    "numeric",
)
_OPTION = re.compile(r"-[A-Za-z0-9]|--[A-Za-z0-9][A-Za-z0-9-]*")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*( [A-Za-z0-9][A-Za-z0-9._:+-]*)?")


class FormError(ValueError):
    """A form in the user's configuration that cannot be used; says how to fix it."""


@dataclass(frozen=True)
class Table:
    """The forms in force: built-in and declared ones, and exact argv entries."""

    forms: Mapping[str, Form]
    exact: frozenset[tuple[str, ...]]
    problems: tuple[str, ...] = ()

    def has_subcommands(self, program: str) -> bool:
        prefix = program + " "
        return any(name.startswith(prefix) for name in self.forms)


def table_for(safe_commands: Any, command_forms: Any) -> Table:
    """The table for ``auto_accept.safe_commands`` and ``auto_accept.command_forms``.

    Never raises: an entry that cannot be used is left out (so it approves
    nothing) and described in `Table.problems`.
    """
    names = tuple(str(entry) for entry in _items(safe_commands))
    declared = command_forms if isinstance(command_forms, Mapping) else {}
    try:
        key = json.dumps(declared, sort_keys=True, default=str)
    except (TypeError, ValueError):
        key = repr(declared)
    return _cached_table(names, key)


@functools.lru_cache(maxsize=32)
def _cached_table(names: tuple[str, ...], declared_json: str) -> Table:
    problems: list[str] = []
    try:
        raw_declared = json.loads(declared_json)
    except ValueError:
        raw_declared, problems = {}, ["auto_accept.command_forms: not a table of forms"]
    declared: dict[str, Form | None] = {}
    for name, raw in raw_declared.items():
        if raw is False:
            declared[name] = None
            continue
        try:
            declared[name] = user_form(name, raw)
        except FormError as exc:
            declared[name] = None
            problems.append(str(exc))

    forms: dict[str, Form] = {}
    exact: set[tuple[str, ...]] = set()
    for entry in names:
        try:
            words = _entry_words(entry)
        except FormError as exc:
            problems.append(str(exc))
            continue
        name = " ".join(words)
        if name in declared:
            continue
        if name in BUILTIN_FORMS:
            forms[name] = BUILTIN_FORMS[name]
        else:
            exact.add(words)
    for name, form in declared.items():
        if form is not None:
            forms[name] = form
        else:
            exact.discard(tuple(name.split(" ")))
    return Table(forms, frozenset(exact), tuple(problems))


def _entry_words(entry: str) -> tuple[str, ...]:
    where = f"auto_accept.safe_commands: {entry!r}"
    try:
        words = shell_words.split(entry)
    except shell_words.Refused as exc:
        raise FormError(f"{where} cannot be used: {exc}") from None
    if not all(w.plain for w in words):
        raise FormError(f"{where}: write the words plainly, without quotes or backslashes")
    program = words[0].text
    if program in NEVER_SAFE or "/" in program:
        raise FormError(f"{where}: {program} runs other programs; it is never auto-accepted")
    return tuple(w.text for w in words)


def user_form(name: str, raw: Any) -> Form:
    """A `Form` from a ``command_forms`` entry; `FormError` says what is wrong."""
    where = f"auto_accept.command_forms[{name!r}]"
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise FormError(
            f"{where}: a form is named by a program, optionally followed by one subcommand "
            '(e.g. "rg" or "cargo check")'
        )
    program = name.split(" ")[0]
    if program in NEVER_SAFE:
        raise FormError(f"{where}: {program} runs other programs; it is never auto-accepted")
    if name == "git":
        raise FormError(f'{where}: declare git forms per subcommand, e.g. ["git blame"]')
    if not isinstance(raw, Mapping):
        raise FormError(f"{where} must be a table (or false to disable the name)")
    unknown = sorted(set(raw) - set(_FORM_FIELDS))
    if unknown:
        raise FormError(f"{where}: unknown field {unknown[0]!r}; fields: {', '.join(_FORM_FIELDS)}")
    sets = {key: _option_set(where, key, raw.get(key)) for key in _FORM_FIELDS[:4]}
    seen: dict[str, str] = {}
    forbidden = FORBIDDEN_OPTIONS["*"] | FORBIDDEN_OPTIONS.get(program, frozenset())
    for key, options in sets.items():
        for option in options:
            if option in forbidden:
                raise FormError(
                    f"{where}: {option} writes, runs programs or reads other files; "
                    "it can never be auto-accepted"
                )
            if option in seen:
                raise FormError(f"{where}: {option} is in both {seen[option]} and {key}")
            seen[option] = key
    operands = raw.get("operands", "paths")
    if operands not in OPERAND_KINDS:
        raise FormError(f"{where}.operands must be one of: {', '.join(OPERAND_KINDS)}")
    max_operands = raw.get("max_operands")
    if max_operands is not None and (
        isinstance(max_operands, bool)
        or not isinstance(max_operands, (int, float))
        or max_operands < 0
        or int(max_operands) != max_operands
    ):
        raise FormError(f"{where}.max_operands must be a whole number >= 0")
    numeric = raw.get("numeric", False)
    if not isinstance(numeric, bool):
        raise FormError(f"{where}.numeric must be true or false")
    return Form(
        name,
        operands=operands,
        max_operands=None if max_operands is None else int(max_operands),
        numeric=numeric,
        **sets,
    )


def _option_set(where: str, key: str, value: Any) -> frozenset[str]:
    items = _items(value)
    for item in items:
        if not isinstance(item, str) or not _OPTION.fullmatch(item):
            raise FormError(
                f"{where}.{key}: {item!r} is not an option; write -x (one letter) or --name"
            )
    return frozenset(items)


def _items(value: Any) -> list[Any]:
    """Lua sends lists as arrays; an empty Lua table may arrive as an empty dict."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        return list(value.values())
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]
