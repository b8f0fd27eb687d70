"""The client's lines, read from stdin for the SDK's stdio transport.

Two kinds of line never reach the SDK, which would hold the first whole and
take the second for a notification (answered by nobody, so the client waits
until its own time limit):

- a line longer than ``MAX_LINE`` bytes: read to its end in pieces and
  dropped, never held whole;
- a line nested past ``MAX_JSON_DEPTH`` levels (the SDK's own parser reads
  up to about 250, and a reader of so deep a value could break);
- a request whose id is neither a string nor an integer (``null``, ``1.5``,
  ``true``, an object: the MCP specification allows only those two).

Each is answered "invalid request" (with its id when the line's head shows
one). In the SDK's stream it stands as ``REFUSED``, a line that is no JSON,
so it comes back to ``MendedReads`` as the SDK's error, in the order read.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections import deque
from collections.abc import Iterator
from typing import Any

import anyio

from ..chat.call_body import MAX_JSON_DEPTH, json_depth

INVALID_REQUEST = -32600
# bytes in one message: far past any call's (one argument of a command or an
# agent's prompt is at most 128 KiB on Linux), far below what holding it costs
MAX_LINE = 8 << 20
CHUNK = 1 << 16
REFUSED = "\0"  # no JSON: the SDK passes it on as an error, in its place


class Refused(Exception):
    """A line answered with an error (JSON-RPC `code`, `message`, the request's
    id when it could be read, else null)."""

    def __init__(self, code: int, message: str, rid: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.rid = code, message, rid


def head(line: str) -> str:
    """The members before the first nested object or array (at most 512
    characters): where a request's own id is (`{"jsonrpc": "2.0", "id": 7, ...`)."""
    cut = min((i for i in (line.find("{", 1), line.find("[", 1)) if i > 0), default=512)
    return line[: min(cut, 512)]


_TOP_ID = re.compile(r'"id"\s*:\s*(-?\d{1,18}(?![\d.eE])|"(?:[^"\\]|\\.){0,256}")')


def _allowed_id(rid: Any) -> bool:
    return isinstance(rid, str) or isinstance(rid, int) and not isinstance(rid, bool)


def top_id(line: str) -> Any:
    """The id of a request whose line cannot be read whole, when its head shows it."""
    m = _TOP_ID.search(head(line))
    if m is None:
        return None
    try:
        return json.loads(m.group(1))
    except ValueError:
        return None


def checked(line: str) -> str | Refused:
    """`line`, or its refusal: nested past MAX_JSON_DEPTH levels, or a request
    with an id MCP does not allow. Only a line that names an id its head does
    not show as a string or an integer is read whole here (the SDK reads every
    line anyway)."""
    # (counted first, at C speed: the scan of json_depth costs seconds on a
    # line of megabytes, and a line needs that many brackets to be that deep)
    if line.count("[") + line.count("{") > MAX_JSON_DEPTH and json_depth(line) > MAX_JSON_DEPTH:
        why = f"Invalid request: nested deeper than {MAX_JSON_DEPTH} levels"
        return Refused(INVALID_REQUEST, why, top_id(line))
    # an id the head shows as no string or integer (null, 1.5, true, an object
    # where the head ends), or an id only after it (JSON members have no order)
    if '"id"' not in line or _TOP_ID.search(head(line)):
        return line
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return line  # the SDK says what is wrong with it
    request = isinstance(message, dict) and "method" in message and "id" in message
    if request and not _allowed_id(message["id"]):
        return Refused(INVALID_REQUEST, "Invalid request: an id must be a string or an integer")
    return line


def _nothing() -> None:
    return None


class Lines:
    """The lines of descriptor `fd`, for ``stdio_server(stdin=...)``; each
    line refused is put in ``refused`` as it is yielded as ``REFUSED``."""

    def __init__(self, fd: int, limit: int = MAX_LINE) -> None:
        self._fd = fd
        self._limit = limit
        self._buf = bytearray()
        self._seen = 0  # bytes of _buf known to hold no newline
        self._eof = False
        self.refused: deque[Refused] = deque()

    def __aiter__(self) -> Lines:
        return self

    async def __anext__(self) -> str:
        line = await self._next()
        if line is None:
            raise StopAsyncIteration
        if isinstance(line, Refused):
            self.refused.append(line)
            return REFUSED
        return line

    async def _next(self) -> str | Refused | None:
        while True:
            end = self._buf.find(b"\n", self._seen)
            if end >= 0:
                return checked(self._take(end + 1))
            self._seen = len(self._buf)
            if self._seen > self._limit:
                return await self._drop()
            if self._eof:
                if self._buf:
                    return checked(self._take(len(self._buf)))
                # one more turn before the end, as a read of stdin takes: the
                # transport's end cuts a request still being answered short
                # (a last request without a line break was never answered)
                await anyio.to_thread.run_sync(_nothing)
                return None
            await self._fill()

    def _take(self, size: int) -> str:
        line = bytes(self._buf[:size])
        del self._buf[:size]
        self._seen = 0
        return line.decode("utf-8", "replace")

    async def _fill(self) -> None:
        chunk = await self._read()
        if chunk:
            self._buf += chunk
        else:
            self._eof = True

    async def _read(self) -> bytes:
        try:
            return await anyio.to_thread.run_sync(os.read, self._fd, CHUNK)
        except OSError:  # closed, or no descriptor at all: the client is gone
            return b""

    async def _drop(self) -> Refused:
        """The rest of a line past the limit, read and let go."""
        start = bytes(self._buf[:4096]).decode("utf-8", "replace")
        self._buf.clear()
        self._seen = 0
        while not self._eof:
            chunk = await self._read()
            end = chunk.find(b"\n")
            if not chunk:
                self._eof = True
            elif end >= 0:
                self._buf += chunk[end + 1 :]
                break
        why = f"Invalid request: longer than {self._limit} bytes"
        return Refused(INVALID_REQUEST, why, top_id(start))


@contextlib.contextmanager
def claimed_stdin() -> Iterator[int]:
    """A private descriptor on the client's pipe; fd 0 reads the null device
    meanwhile, so nothing the server runs reads the protocol's channel (what
    the SDK does with a stdin it opens itself). Restored at the end; the
    private descriptor stays open, as a reader thread may still wait on it."""
    try:
        private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError:  # no stdin at all: read as an empty one (fd 0 may be a file opened later)
        yield -1
        return
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    try:
        yield private
    finally:
        os.dup2(private, 0)
