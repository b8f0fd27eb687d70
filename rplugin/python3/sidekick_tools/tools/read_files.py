"""read_files: the contents of one or more files, one section per file."""

from __future__ import annotations

import asyncio
import codecs
from typing import Any

from . import _fs
from .base import ToolContext, ToolResult
from .schema import array, object_schema, string, validate

MAX_FILE_BYTES = 256 * 1024  # a bigger file is noted, not pasted: a chat is no place for it
# One call reads at most this many files and this much in all: the model controls
# the list, and the host holds the answer in memory before it is written.
MAX_FILES = 64
MAX_TOTAL_BYTES = 2 * 1024 * 1024
_SNIFF = 8192


class ReadFiles:
    name = "read_files"
    description = "Read one or more text files (paths relative to the chat's working directory)."
    schema = object_schema(
        {
            "paths": array(
                string(min_length=1),
                f"Files to read (at most {MAX_FILES}), relative to the working directory.",
                min_items=1,
                max_items=MAX_FILES,
            ),
        },
        required=["paths"],
    )

    def auto_accept(self, params: dict[str, Any], ctx: ToolContext) -> bool:
        """True when every path really lies inside ctx.cwd (symlinks and .. resolved)."""
        paths = params.get("paths")
        if not isinstance(paths, list) or not paths:
            return False
        return all(isinstance(p, str) and _fs.is_inside(p, ctx.cwd) for p in paths)

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> ToolResult:
        err = validate(self.schema, params)
        if err:
            return ToolResult.fail(err)
        # run unasked, each file must be inside the working directory as it is
        # opened, not only as it was checked (a link swapped in between)
        inside = ctx.cwd if ctx.auto else None
        return await asyncio.to_thread(read_sections, list(params["paths"]), ctx.cwd, inside)


OVER_BUDGET = f"{MAX_TOTAL_BYTES} bytes; read it in another call"


def read_sections(paths: list[str], cwd: str, inside: str | None = None) -> ToolResult:
    sections = []
    problems = []  # "path: why" of each section that failed
    budget = MAX_TOTAL_BYTES
    for shown in paths:
        if budget <= 0:
            ok, text = False, f"[not read: this call already read {OVER_BUDGET}]"
        else:
            ok, text = _read_one(shown, cwd, min(MAX_FILE_BYTES, budget), inside)
            budget -= len(text.encode("utf-8", "replace"))
        if not ok:
            problems.append(f"{shown}: {text[1:-1].removeprefix('error: ')}")
        sections.append(f"==> {shown} <==\n{text}")
    body = "\n\n".join(sections)
    if problems:
        return ToolResult("failed", body, {}, detail=problems[0])
    return ToolResult.ok(body)


def _read_one(
    shown: str, cwd: str, limit: int = MAX_FILE_BYTES, inside: str | None = None
) -> tuple[bool, str]:
    """(ok, text) for one path, at most `limit` bytes of it; text is the content
    or a bracketed error."""
    try:
        # a file too large to paste: only what tells text from binary is read
        path = _fs.resolve(shown, cwd)
        data, size = _fs.read_regular(path, limit, (MAX_FILE_BYTES, _SNIFF), inside)
    except _fs.PathError as e:
        return False, f"[error: {e}]"
    except IsADirectoryError:
        return False, "[error: is a directory; use list_directory]"
    except OSError as e:
        return False, f"[error: {_fs.describe_os_error(e)}]"
    return True, _render(data, size)


def _render(data: bytes, size: int) -> str:
    if looks_binary(data):
        return f"[binary file: {size} bytes]"
    if size > MAX_FILE_BYTES:
        return (
            f"[not pasted: {size} bytes, over the {MAX_FILE_BYTES // 1024} KiB a file may "
            "take in the chat; read parts of it with run_terminal_command "
            "(e.g. head, sed -n '1,200p', grep -n)]"
        )
    truncated = size > len(data)
    # An incremental decoder holds back a multi-byte character cut by the cap.
    text = codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=not truncated)
    if text.endswith("\n"):
        text = text[:-1]
    notes = []
    if "\ufffd" in text and not _valid_utf8(data, truncated):
        notes.append("[note: not valid UTF-8; undecodable bytes are shown as \ufffd]")
    if truncated:
        notes.append(
            f"[truncated: showing the first {len(data)} of {size} bytes, all this call "
            "had left; read the rest in another call or with run_terminal_command]"
        )
    if not notes:
        return text
    return "\n".join([text, *notes]) if text else "\n".join(notes)


def looks_binary(data: bytes) -> bool:
    """NUL bytes, or mostly undecodable, in the first 8 KiB."""
    head = data[:_SNIFF]
    if b"\x00" in head:
        return True
    if not head:
        return False
    decoded = codecs.getincrementaldecoder("utf-8")("replace").decode(head, final=False)
    bad = decoded.count("\ufffd") - head.count(b"\xef\xbf\xbd")
    return bad > max(8, len(decoded) // 10)


def _valid_utf8(data: bytes, truncated: bool) -> bool:
    try:
        codecs.getincrementaldecoder("utf-8")("strict").decode(data, final=not truncated)
    except UnicodeDecodeError:
        return False
    return True


TOOL = ReadFiles()
