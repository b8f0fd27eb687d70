"""write_file: create or replace a whole file, atomically."""

from __future__ import annotations

from typing import Any

from . import _fs
from .base import ToolResult
from .path_tool import PathTool
from .schema import MAX_CONTENT, object_schema, string


class WriteFile(PathTool):
    name = "write_file"
    writes = True
    description = "Create or overwrite a file with the given content (parent directories created)."
    schema = object_schema(
        {
            "path": string("File to write, relative to the working directory.", min_length=1),
            "content": string("The complete new content of the file.", max_length=MAX_CONTENT),
        },
        required=["path", "content"],
    )

    def work(self, params: dict[str, Any], cwd: str) -> ToolResult:
        return write(params["path"], params["content"], cwd)


def write(shown: str, content: str, cwd: str) -> ToolResult:
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError:
        return ToolResult.fail(f"{shown}: content is not valid Unicode (lone surrogate)")
    try:
        path = _fs.resolve(shown, cwd)
        previous = _fs.atomic_write(path, data)
    except _fs.PathError as e:
        return ToolResult.fail(f"{shown}: {e}")
    except OSError as e:
        return ToolResult.fail(f"{shown}: cannot write: {_fs.describe_os_error(e)}")
    shown = _fs.as_written(shown, cwd)
    if previous is None:
        return ToolResult.ok(f"Created {shown} ({_bytes(len(data))} written).")
    return ToolResult.ok(
        f"Replaced {shown} ({_bytes(len(data))} written; it had {_bytes(previous)})."
    )


def _bytes(n: int) -> str:
    return "1 byte" if n == 1 else f"{n} bytes"


TOOL = WriteFile()
