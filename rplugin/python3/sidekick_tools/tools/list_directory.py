"""list_directory: the entries of one directory, sorted, one per line."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from . import _fs
from .base import ToolContext, ToolResult
from .path_tool import PathTool
from .schema import object_schema, string, validate

MAX_ENTRIES = 1000


class ListDirectory(PathTool):
    name = "list_directory"
    description = "List a directory: directories end in /, symlinks show -> target."
    schema = object_schema(
        {"path": string("Directory to list, relative to the working directory.", min_length=1)},
        required=["path"],
    )

    def work(self, params: dict[str, Any], cwd: str) -> ToolResult:
        return list_entries(params["path"], cwd)

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> ToolResult:
        err = validate(self.schema, params)
        if err:
            return ToolResult.fail(err)
        # run unasked, the folder opened must be inside the working directory,
        # not only the path checked before (a link swapped in between)
        inside = ctx.cwd if ctx.auto else None
        return await asyncio.to_thread(list_entries, params["path"], ctx.cwd, MAX_ENTRIES, inside)


def list_entries(
    shown: str, cwd: str, limit: int = MAX_ENTRIES, inside: str | None = None
) -> ToolResult:
    try:
        path = _fs.resolve(shown, cwd)
        fd = os.open(
            path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NONBLOCK", 0)
        )
        try:
            if inside is not None and not _fs.opened_inside(fd, inside):
                raise _fs.LedOutside()
            with os.scandir(fd) as it:
                entries = [(e.name, _line(e, fd)) for e in it]
        finally:
            os.close(fd)
    except _fs.PathError as e:
        return ToolResult.fail(f"{shown}: {e}")
    except FileNotFoundError:
        return ToolResult.fail(f"{shown}: no such directory")
    except NotADirectoryError:
        return ToolResult.fail(f"{shown}: not a directory (read it with read_files)")
    except OSError as e:
        return ToolResult.fail(f"{shown}: {_fs.describe_os_error(e)}")

    entries.sort()
    lines = [line for _, line in entries[:limit]]
    rest = len(entries) - limit
    if rest > 0:
        lines.append(f"[... {rest} more entries not shown ({len(entries)} in total)]")
    if not lines:
        return ToolResult.ok("[empty directory]")
    return ToolResult.ok("\n".join(lines))


def _line(entry: os.DirEntry, fd: int) -> str:
    try:
        if entry.is_symlink():
            try:
                return f"{entry.name} -> {os.readlink(entry.name, dir_fd=fd)}"
            except OSError:
                return f"{entry.name} -> ?"
        if entry.is_dir(follow_symlinks=False):
            return entry.name + "/"
    except OSError:
        pass
    return entry.name


TOOL = ListDirectory()
