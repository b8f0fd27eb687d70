"""Task output: markers, summaries, bounded reads of a log, filter regexes.

A task's stdout/stderr are files written by the task itself; the engine only
ever reads them, and always in bounded pieces:

- `read_new()` gives a caller (task_output) the bytes after an offset it keeps.
- `summary_of()` turns a bounded piece of text into the summary shown to the LLM.
- `log_follower.LogFollower` reads a growing log incrementally.

Output protocol (a marker starts a line; leading blanks and ANSI codes allowed):
`[PROGRESS] text`, `[PROGRESS:NN] text` (NN percent, clamped to 0..100),
`[RESULT] ...` (start of the final result), `[ERROR] ...`, `[WARNING] ...`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from re import Pattern
from typing import Union

from ..text import after_cut, clean, decode, strip_ansi

_MARKER_RE = re.compile(
    r"^[ \t]*\[(PROGRESS(?::[ \t]*(\d{1,3})[ \t]*%?)?|RESULT|ERROR|WARNING)\][ \t]?(.*)$"
)
MARKER_BYTES_RE = re.compile(_MARKER_RE.pattern.encode(), re.S)

SUMMARY_LINES = 50
SUMMARY_BYTES = 8 * 1024


@dataclass(frozen=True)
class Marker:
    kind: str  # "progress" | "result" | "error" | "warning"
    text: str
    percent: int | None = None


def parse_line(line: str) -> Marker | None:
    """The marker a line carries, if any (ANSI codes are ignored)."""
    m = _MARKER_RE.match(strip_ansi(line).rstrip("\r\n"))
    if m is None:
        return None
    word, pct, rest = m.group(1), m.group(2), m.group(3)
    kind = word.split(":", 1)[0].lower()
    percent = None
    if pct is not None:
        percent = max(0, min(100, int(pct)))
    return Marker(kind, rest.strip(), percent)


@dataclass(frozen=True)
class Progress:
    percent: int | None
    text: str


def _tail(text: str, max_lines: int, max_bytes: int) -> str:
    lines = text.rstrip("\n").split("\n")
    out = "\n".join(lines[-max_lines:]) if max_lines > 0 else ""
    encoded = out.encode("utf-8")
    if len(encoded) > max_bytes:
        out = encoded[-max_bytes:].decode("utf-8", errors="ignore")
        # Drop the (probably cut) first line when there is more than one, else its cut word.
        out = out.split("\n", 1)[1] if "\n" in out else after_cut(out).lstrip()
    return out


def summary_of(text: str, max_lines: int = SUMMARY_LINES, max_bytes: int = SUMMARY_BYTES) -> str:
    """The summary of some output.

    ANSI codes stripped; then the content from the last `[RESULT]` marker on
    (the marker itself removed) if there is one; else the agent's last
    response: what follows the last `> ` at the start of a line, the rest of
    that line included (kiro-style CLIs print `> ` then the answer on the same
    line), up to the end, if non-empty; else the tail (last `max_lines` lines,
    at most `max_bytes` bytes).
    """
    text = clean(text)
    found = from_last_result(text)
    if found is not None:
        return found
    return prompt_or_tail(text, max_lines, max_bytes)


def from_last_result(text: str) -> str | None:
    """Cleaned `text` from its last `[RESULT]` marker line on (the marker
    removed), or None when it has no such line."""
    if "[RESULT]" not in text:  # a marker line holds it literally: no need to match each line
        return None
    lines = text.split("\n")
    for i in range(len(lines) - 1, -1, -1):
        m = _MARKER_RE.match(lines[i])
        if m is not None and m.group(1) == "RESULT":
            first = m.group(3).strip()
            body = ([first] if first else []) + lines[i + 1 :]
            return "\n".join(body).strip("\n").rstrip()
    return None


def prompt_or_tail(text: str, max_lines: int, max_bytes: int) -> str:
    """Summary of cleaned `text` without a `[RESULT]`: what follows the last
    `> ` at the start of a line (that line's rest included) if non-empty, else
    the tail."""
    lines = text.split("\n")
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("> "):
            after = "\n".join([lines[i][2:], *lines[i + 1 :]]).strip("\n").rstrip()
            if after.strip():
                return after
            break
    return _tail(text, max_lines, max_bytes).strip("\n").rstrip()


# --------------------------------------------------------------------------- files


@dataclass(frozen=True)
class Chunk:
    data: bytes
    offset: int  # where `data` starts in the file
    next_offset: int  # offset to continue from
    size: int  # file size seen
    more: bool  # unread bytes remain after next_offset (max_bytes cut, partial line)

    @property
    def text(self) -> str:
        return clean(decode(self.data))


WORD = 4096  # bytes: how far back a piece of a long line looks for a blank to end at


def read_new(
    path: str, offset: int, max_bytes: int = 64 * 1024, *, complete_lines: bool = True
) -> Chunk:
    """Bytes of `path` after `offset`, at most `max_bytes`.

    With `complete_lines`, a trailing partial line is left for next time
    (unless it alone exceeds `max_bytes`). A missing file reads as empty.
    """
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if offset > size:  # truncated or replaced: start over
                offset = 0
            f.seek(offset)
            data = f.read(max(0, max_bytes))
    except FileNotFoundError:
        return Chunk(b"", offset, offset, 0, False)
    end = offset + len(data)
    if complete_lines and data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n")
        if cut >= 0:
            data = data[: cut + 1]
        elif end < size:
            # one line longer than max_bytes: handed out in pieces, each cut
            # after a blank near its end, so that a word (a key) is never split
            # between two (masking would not know the next piece's start)
            blank = max(data.rfind(b" ", -WORD), data.rfind(b"\t", -WORD))
            if blank > 0:
                data = data[: blank + 1]
        else:
            data = b""
    nxt = offset + len(data)
    return Chunk(data, offset, nxt, size, nxt < size)


def tail_bytes(path: str, max_bytes: int) -> bytes:
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - max_bytes))
            return f.read(max_bytes)
    except FileNotFoundError:
        return b""


def read_range(path: str, start: int, max_bytes: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read(max_bytes)
    except FileNotFoundError:
        return b""


FilterPattern = Union[str, Pattern[str]]


def compile_filter(pattern: FilterPattern) -> Pattern[str]:
    """Compile a filter regex; `/re/` slashes are accepted. Bad regex: ValueError."""
    if not isinstance(pattern, str):
        return pattern
    if len(pattern) >= 2 and pattern.startswith("/") and pattern.endswith("/"):
        pattern = pattern[1:-1]
    try:
        return re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as exc:  # nested too deep, {99999999999}
        why = exc if isinstance(exc, re.error) else f"too large to compile ({type(exc).__name__})"
        raise ValueError(f"invalid filter regex {pattern[:200]!r}: {why}") from None


def filter_lines(text: str, pattern: FilterPattern) -> list[str]:
    """Lines of `text` matching `pattern` (searched anywhere in the line).

    Pure: it consumes nothing. The caller's "new since last read" offset is
    advanced (or not) by the caller, independently of what the filter hides.
    """
    rx = compile_filter(pattern)
    return [line for line in text.split("\n") if rx.search(line)]


# --------------------------------------------------------------------------- follower
