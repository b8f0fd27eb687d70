"""list_directory: the entries of one directory, sorted, one per line."""

from __future__ import annotations

import os
from typing import Any

from . import _fs
from .base import ToolResult
from .path_tool import PathTool
from .schema import object_schema, string

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


def list_entries(shown: str, cwd: str, limit: int = MAX_ENTRIES) -> ToolResult:
    try:
        path = _fs.resolve(shown, cwd)
        with os.scandir(path) as it:
            entries = list(it)
    except _fs.PathError as e:
        return ToolResult.fail(f"{shown}: {e}")
    except FileNotFoundError:
        return ToolResult.fail(f"{shown}: no such directory")
    except NotADirectoryError:
        return ToolResult.fail(f"{shown}: not a directory (read it with read_files)")
    except OSError as e:
        return ToolResult.fail(f"{shown}: {_fs.describe_os_error(e)}")

    entries.sort(key=lambda e: e.name)
    lines = [_line(e) for e in entries[:limit]]
    rest = len(entries) - limit
    if rest > 0:
        lines.append(f"[... {rest} more entries not shown ({len(entries)} in total)]")
    if not lines:
        return ToolResult.ok("[empty directory]")
    return ToolResult.ok("\n".join(lines))


def _line(entry: os.DirEntry) -> str:
    try:
        if entry.is_symlink():
            try:
                return f"{entry.name} -> {os.readlink(entry.path)}"
            except OSError:
                return f"{entry.name} -> ?"
        if entry.is_dir(follow_symlinks=False):
            return entry.name + "/"
    except OSError:
        pass
    return entry.name


TOOL = ListDirectory()
