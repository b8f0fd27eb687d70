"""replace_in_file: replace one exact, unique occurrence of a text in a file."""

from __future__ import annotations

from typing import Any

from . import _fs
from .base import ToolResult
from .path_tool import PathTool
from .schema import MAX_CONTENT, object_schema, string

MAX_FILE_BYTES = 64 << 20  # refuse to edit files bigger than this in memory
SHOW_LINES = 40  # lines of the replaced region echoed back


class ReplaceInFile(PathTool):
    name = "replace_in_file"
    writes = True
    description = "Replace the one occurrence of `old` in a file with `new` (must match once)."
    schema = object_schema(
        {
            "path": string("File to edit, relative to the working directory.", min_length=1),
            "old": string(
                "Exact text to replace; must occur exactly once in the file.",
                min_length=1,
                max_length=MAX_CONTENT,
            ),
            "new": string("Replacement text (may be empty to delete).", max_length=MAX_CONTENT),
        },
        required=["path", "old", "new"],
    )

    def work(self, params: dict[str, Any], cwd: str) -> ToolResult:
        return replace(params["path"], params["old"], params["new"], cwd)


def replace(shown: str, old: str, new: str, cwd: str) -> ToolResult:
    try:
        path = _fs.resolve(shown, cwd)
        raw, _size = _fs.read_regular(path, MAX_FILE_BYTES + 1)
    except _fs.PathError as e:
        return ToolResult.fail(f"{shown}: {e}")
    except OSError as e:
        return ToolResult.fail(f"{shown}: cannot read: {_fs.describe_os_error(e)}")
    if len(raw) > MAX_FILE_BYTES:
        return ToolResult.fail(f"{shown}: larger than {MAX_FILE_BYTES >> 20} MiB; not editing")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return ToolResult.fail(f"{shown}: not valid UTF-8 text; not editing")

    count = _count(text, old)
    if count == 0 and "\r\n" in text and "\n" in old and "\r\n" not in old:
        # The model wrote LF; the file uses CRLF. Match and write in the file's style.
        crlf_old = old.replace("\n", "\r\n")
        if _count(text, crlf_old):
            old, new = crlf_old, new.replace("\r\n", "\n").replace("\n", "\r\n")
            count = _count(text, old)
    if count == 0:
        return ToolResult.fail(f'{shown}: "old" not found; nothing was changed.')
    if count > 1:
        return ToolResult.fail(
            f'{shown}: "old" found {count} times; give more context so it matches '
            "exactly once. Nothing was changed."
        )

    start = text.find(old)
    first, last = _line_span(text, start, start + len(old))
    shown = _fs.as_written(shown, cwd)
    if old == new:
        return ToolResult.ok(f"{shown}: old and new are identical (line {first}); unchanged.")
    result = text[:start] + new + text[start + len(old) :]
    try:
        data = result.encode("utf-8")
    except UnicodeEncodeError:
        return ToolResult.fail(f'{shown}: "new" is not valid Unicode (lone surrogate)')
    try:
        _fs.atomic_write(path, data)
    except OSError as e:
        return ToolResult.fail(f"{shown}: cannot write: {_fs.describe_os_error(e)}")

    old_range = _range(first, last)
    if not new:
        return ToolResult.ok(f"Removed {old_range} of {shown}.")
    new_first, new_last = _line_span(result, start, start + len(new))
    head = f"Replaced {old_range} of {shown}; now {_range(new_first, new_last)}:"
    return ToolResult.ok(head + "\n" + _excerpt(result, start, start + len(new), new_first))


def _count(text: str, sub: str) -> int:
    """Occurrences of ``sub``; overlapping ones count (so "aa" is twice in "aaa")."""
    n = text.count(sub)
    if n == 1 and text.find(sub, text.find(sub) + 1) != -1:
        return 2
    return n


def _line_span(text: str, a: int, b: int) -> tuple[int, int]:
    """1-based first and last line of text[a:b] (a trailing newline ends its own line)."""
    first = text.count("\n", 0, a) + 1
    last = text.count("\n", 0, b - 1) + 1 if b > a else first
    return first, last


def _range(first: int, last: int) -> str:
    return f"line {first}" if first == last else f"lines {first}-{last}"


def _excerpt(text: str, a: int, b: int, first: int) -> str:
    """The whole lines covering text[a:b], numbered, at most SHOW_LINES of them."""
    line_start = text.rfind("\n", 0, a) + 1
    end = b - 1 if b > a and text[b - 1] == "\n" else b
    line_end = text.find("\n", end)
    if line_end == -1:
        line_end = len(text)
    lines = text[line_start:line_end].split("\n")
    width = len(str(first + len(lines) - 1))
    out = [f"{first + i:>{width}} | {s.rstrip(chr(13))}" for i, s in enumerate(lines[:SHOW_LINES])]
    if len(lines) > SHOW_LINES:
        out.append(f"[... {len(lines) - SHOW_LINES} more lines]")
    return "\n".join(out)


TOOL = ReplaceInFile()
