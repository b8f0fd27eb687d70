"""Render the plugin's additions to a chat buffer: result blocks, ids, notices.

Pure Python, no Neovim. Everything produced here parses back with
:func:`sidekick_tools.chat.parser.parse` to the same values.
"""

from __future__ import annotations

import json
import re
import secrets

from ..text import for_buffer

_BACKTICK_RUN = re.compile(r"`+")
_UNSAFE_VALUE = re.compile(r"[\s`]+")
_ID_TOKEN = re.compile(r"(?<=\s)id=\S*")


def fence_for(text: str, minimum: int = 3) -> str:
    """A backtick fence longer than any backtick run in ``text``, at least ``minimum`` long."""
    longest = max((len(m) for m in _BACKTICK_RUN.findall(text)), default=0)
    return "`" * max(minimum, longest + 1)


def _token(value: object) -> str:
    """A value made safe for an info string: no whitespace, no backticks."""
    return _UNSAFE_VALUE.sub("_", str(value))


def _format_value(key: str, value: str | int | float) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if key == "duration" and isinstance(value, (int, float)):
        return f"{float(value):.2f}s"
    if isinstance(value, float):
        if value.is_integer():
            return str(int(value))
        return f"{value:.3f}".rstrip("0").rstrip(".")
    return _token(value)


def result_lines(
    call_id: str, status: str, fields: dict[str, str | int | float], body: str
) -> list[str]:
    """The whole result block, fences included, as buffer lines.

    ``fields`` are rendered in insertion order as ``key=value``; ``None`` values are
    skipped, a numeric ``duration`` renders as seconds (``duration=2.31s``), other
    floats without trailing zeros, and whitespace or backticks inside values become
    ``_`` so the info string stays one token per field. ``body`` is written verbatim
    (split on ``\\n``; an empty body gives no body lines), so parsing the block back
    gives the same body; strip a trailing newline before calling if you do not want
    a blank last line.
    """
    fence = fence_for(body)
    parts = [f"{fence}result id={_token(call_id)} status={_token(status)}"]
    for key, value in fields.items():
        if value is None:
            continue
        parts.append(f"{_token(key)}={_format_value(key, value)}")
    lines = [" ".join(parts)]
    if body:
        lines.extend(body.split("\n"))
    lines.append(fence)
    return lines


def header_with_id(header_line: str, call_id: str) -> str:
    """The call header with ``id=call_id``: appended when it has none, else replaced.

    Everything else on the line is kept (a trailing CR too); trailing blanks before
    the appended token are dropped.
    """
    line, cr = (header_line[:-1], "\r") if header_line.endswith("\r") else (header_line, "")
    fence_end = len(line) - len(line.lstrip("`"))
    fence, info = line[:fence_end], line[fence_end:]
    new_info, count = _ID_TOKEN.subn(lambda _m: f"id={call_id}", info, count=1)
    if not count:
        new_info = f"{info.rstrip()} id={call_id}"
    return f"{fence}{new_info}{cr}"


def new_call_id(taken: set[str]) -> str:
    """A fresh call id, ``call_`` followed by 6 lowercase hex digits, not in ``taken``."""
    while True:
        call_id = "call_" + secrets.token_hex(3)
        if call_id not in taken:
            return call_id


# The first line of a result whose tail alone was read (run_terminal_command):
# the lines it left out, when they were counted, and their bytes
_SKIPPED = re.compile(
    r"\[\.\.\. (?:(?P<lines>\d+) earlier lines \((?P<bytes>\d+) bytes\)"
    r"|(?P<only_bytes>\d+) earlier bytes) not shown; full log: .*\]"
)


def truncate_tail(text: str, max_lines: int, log_path: str | None, noted: bool = False) -> str:
    """Keep the last ``max_lines`` lines of ``text``; say how many were cut and where all is.

    A trailing newline does not count as an extra line and is preserved. When lines
    are cut, the result starts with one line such as
    ``[... 1234 earlier lines truncated; full output: /path/to/log]``.
    ``noted``: the first line is the tail read's own note of what it left out
    (`Streams.out_cut`), whose count the new note adds up; otherwise the
    command wrote every line, and none is taken for such a note.
    """
    max_lines = max(0, max_lines)
    trailing = text.endswith("\n")
    lines = (text[:-1] if trailing else text).split("\n")
    if not text or len(lines) <= max_lines:
        return text
    cut = len(lines) - max_lines
    skipped = _SKIPPED.fullmatch(lines[0]) if noted else None  # what the tail read left out
    shown_cut = cut - 1 if skipped else cut
    if skipped and skipped["lines"] is not None:
        shown_cut += int(skipped["lines"])  # every line before the ones kept
    word = "line" if shown_cut == 1 else "lines"
    note = f"[... {shown_cut} earlier {word} truncated"
    if skipped and skipped["only_bytes"] is not None:
        # lines not counted (a huge log): the two spans, in the order they come
        note = (
            f"[... the first {skipped['only_bytes']} bytes, then {shown_cut} more {word}, not shown"
        )
    note += f"; full output: {log_path}]" if log_path else "]"
    kept = lines[cut:]
    out = "\n".join([note, *kept])
    return out + "\n" if trailing and kept else out


STDERR_MARK = "[stderr]"  # the line between a result's stdout and its stderr


def join_streams(out: str, err: str, note: str = "") -> str:
    """A task's result body from its parts: stdout, then stderr under a
    `[stderr]` line, then ``note`` (why it ended); empty parts left out."""
    parts = [out] if out else []
    if err:
        parts.append(f"{STDERR_MARK}\n{err}")
    if note:
        parts.append(note)
    return "\n".join(parts)


def truncate_streams(
    out: str,
    err: str,
    note: str,
    max_lines: int,
    log_path: str | None,
    err_path: str | None = None,
    out_cut: bool = False,
    err_cut: bool = False,
) -> str:
    """`join_streams`, cut to ``max_lines`` like `truncate_tail`: when lines
    must go and there is stderr, each stream keeps its share of ``max_lines``,
    the marker included, so a long stderr never hides stdout and its own marker.
    The streams come apart by these parameters, never by looking for the marker
    in the text, which the command wrote (a stdout line `[stderr]` is stdout).
    ``log_path`` and ``err_path`` name the two logs in the notes of what was cut;
    ``out_cut``, ``err_cut``: the stream begins with the tail read's note (see
    `truncate_tail`)."""
    text = join_streams(out, err, note)
    lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    room = max(0, max_lines) - 1  # the marker's line
    if not err or lines <= max_lines or room < 2:
        return truncate_tail(text, max_lines, log_path, noted=out_cut if out else False)
    rest = f"{err}\n{note}" if note else err  # what follows the marker
    trailing = rest.endswith("\n")
    out_lines = out.split("\n") if out else []
    err_lines = (rest[:-1] if trailing else rest).split("\n")
    keep_out = min(len(out_lines), max(room // 2, room - len(err_lines)))
    parts = [truncate_tail(out, keep_out, log_path, noted=out_cut)] if out else []
    err_text = "\n".join(err_lines)
    parts += [STDERR_MARK, truncate_tail(err_text, room - keep_out, err_path, noted=err_cut)]
    return "\n".join(parts) + ("\n" if trailing else "")


def clean_output(data: bytes) -> str:
    """Process output as text fit for a buffer (see `text.for_buffer`)."""
    return for_buffer(data)


_NOTICE_HEAD = re.compile(r"USER: \[sidekick task [0-9a-f]{6} [a-z]+\]\s*$")


def is_notice(line: str) -> bool:
    """Whether ``line`` starts a completion notice (the first line `notice_lines` writes)."""
    return _NOTICE_HEAD.match(line) is not None


def notice_lines(payload: dict) -> list[str]:
    """The completion notice (DESIGN §7): a ``USER:`` message carrying ``payload`` as JSON.

    ``payload`` holds ``id, status, started_at, ended_at, duration_seconds, exit_code,
    output, log``; ``output`` must already be tail-truncated by the caller. The lines
    end with an empty line so that following text stays apart from the block.
    """
    text = json.dumps(payload, indent=2, ensure_ascii=False)
    fence = fence_for(text)
    return [
        f"USER: [sidekick task {payload.get('id')} {payload.get('status')}]",
        f"{fence}json",
        *text.split("\n"),
        fence,
        "",
    ]
