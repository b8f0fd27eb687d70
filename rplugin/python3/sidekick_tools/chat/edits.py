"""Where the plugin's additions go in a chat: pure edit computations.

An edit is (start, end, lines): replace rows [start, end) with `lines`, in the
buffer as parsed. The caller applies several bottom-up in one change.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..text import loads_json
from .parser import Chat, ToolCall
from .render import is_notice

Edit = tuple[int, int, list[str]]


def result_span(call: ToolCall) -> tuple[int, int]:
    """Rows a call's result block occupies, or the empty span right after the call."""
    if call.result is not None:
        return call.result.start_row, call.result.end_row + 1
    return call.end_row + 1, call.end_row + 1


def notice_edit(chat: Chat, lines: list[str], notice: list[str]) -> Edit:
    """Where a completion notice goes: before the last USER message when the user
    may be typing there, else at the end. An earlier notice is the plugin's own
    USER message: the next one goes after it, so notices keep their order."""
    n = len(lines)
    last = chat.messages[-1] if chat.messages else None
    if last is not None and last.role == "USER" and not is_notice(lines[last.start_row]):
        at = last.start_row
        return (at, at, [*notice, ""] if notice[-1] != "" else notice)
    pad = [""] if (n and lines[-1].strip() != "") else []
    return (n, n, pad + notice)


def user_line_edit(chat: Chat, resolving: list[ToolCall], lines: list[str]) -> Edit | None:
    """Append `USER: ` when `resolving` are the last pending calls of the last
    assistant message, unless the chat already ends with a USER message."""
    last = chat.last_assistant()
    if last is None or not chat.messages or chat.messages[-1] is not last:
        return None
    now = {id(c) for c in resolving}
    if not any(id(c) in now for c in last.calls):
        return None
    if any(c.pending and id(c) not in now for c in last.calls):
        return None
    n = len(lines)
    add = ["USER: "] if (n and lines[-1].strip() == "") else ["", "USER: "]
    return (n, n, add)


def locate(
    chat: Chat,
    call_id: str,
    row: int,
    tool: str = "",
    body: str | None = None,
    reloaded: bool = False,
) -> ToolCall | None:
    """The block of call `call_id` (`tool`, its text `body` when it started)
    that still asks for the same: the one at `row` (its extmark's row, -1 when
    the mark is gone), else the first with that id (saving, reloading or
    reformatting a chat moves or drops extmarks but keeps the text). A block
    whose text asks for something else (edited while the call ran, or a later
    block reusing the id after the call's was deleted) is not the call's: a
    result written there would answer a question it was not asked.

    A hand-written call gets its id in the buffer when it runs; reloading the
    file unsaved (`:e!`) takes the id away again. When `reloaded`, a pending
    block without an id that reads the same is the call then: the one at
    `row`, else the only one."""

    def same(call: ToolCall) -> bool:
        return body is None or asks_the_same(call, tool, body)

    call = chat.call_at(row) if row >= 0 else None
    if call is not None and call.start_row == row and call.call_id == call_id and same(call):
        return call
    found = chat.call_by_id(call_id)
    if found is not None:
        return found if same(found) else None
    if body is None or not reloaded:
        return None
    twins = [
        c for c in chat.calls if not c.call_id and c.pending and (c.tool, c.body) == (tool, body)
    ]
    at_row = [c for c in twins if c.start_row == row]
    return (at_row or twins)[0] if at_row or len(twins) == 1 else None


def asks_the_same(call: ToolCall, tool: str, body: str) -> bool:
    """Whether `call` is a call of `tool` whose text is `body`, or whose JSON
    reads the same (a formatter may have changed its spacing)."""
    if call.tool != tool:
        return False
    if call.body == body:
        return True
    try:
        return call.params is not None and _same_json(call.params, loads_json(body))
    except (ValueError, RecursionError):
        return False


def _same_json(a: Any, b: Any) -> bool:
    """JSON values equal as JSON: Python's == holds true equal to 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b))
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers):
        return a == b  # 1 and 1.0: the same number
    return type(a) is type(b) and a == b


# Parameters that say where a call reads, writes or runs: a question about the
# call shows them whole, whatever the model put before them.
_WHERE = ("path", "paths", "cwd")
_WRITTEN = ("new", "content")


# (from the start of a run of blanks only: from each of a long run with no line
# break after it, the run was scanned again, 16 s for a call of 100 KB)
_LINE_BREAK = re.compile(r"(?<![ \t])[ \t]*\n[ \t\n]*")
_BLANKS = re.compile(r"[ \t]+")


# Letters Unicode calls printable that draw as blank (Hangul fillers, the blank
# Braille pattern): `yㅤz` reads as `y z`, one word to the shell.
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def visible(text: str) -> str:
    """`text` on one line, as a person must read it to judge it: runs of plain
    spaces and tabs become one space, a line break shows as ⏎ (the shell starts
    another command there: it must not read as a space between arguments); any
    other space or invisible character, \r included, shows as its code
    (`ls<U+00A0>-la` is not `ls -la`)."""
    text = _BLANKS.sub(" ", _LINE_BREAK.sub(" ⏎ ", text.strip(" \t\n"))).strip(" ")
    return "".join(
        c
        if c == " " or (c.isprintable() and not c.isspace() and c not in _BLANK_LETTERS)
        else f"<U+{ord(c):04X}>"
        for c in text
    )


def describe(call: ToolCall, limit: int = 120) -> str:
    """One line naming what a call would do: a command or an agent's message,
    whole (what the shell runs, or the agent acts on, after a cut would go
    unseen), or its other parameters, cut to `limit` (what a write puts in the
    file first, and how much the cut left out said); then, never cut, where it
    acts (its path, paths or cwd)."""
    params = call.params or {}
    # what is written (`new`, `content`) before what is replaced (`old`): a long
    # `old` put first cut away the whole of what the write puts in the file
    keys = sorted((k for k in params if k not in _WHERE), key=lambda k: k not in _WRITTEN)
    rest = {k: params[k] for k in keys}
    if call.tool == "run_terminal_command" and isinstance(params.get("command"), str):
        limit = 0  # no cut
        text = params["command"]
    elif call.tool == "use_agent":
        limit = 0
        text = f"{params.get('agent')}: {params.get('message')}"
    elif params:
        text = json.dumps(rest, ensure_ascii=False) if rest else ""
    else:
        text = call.body
    text = visible(str(text))
    where = " ".join(
        f"{key}={json.dumps(params[key], ensure_ascii=False)}" for key in _WHERE if key in params
    )
    where = visible(where)
    room = max(20, limit - len(where) - 3) if where else limit
    if limit and len(text) > room:
        take = max(0, room - len(f"… [+{len(text)} chars]"))
        text = f"{text[:take]}… [+{len(text) - take} chars]"
    if not where:
        return text
    return f"{text} ({where})" if text else where
