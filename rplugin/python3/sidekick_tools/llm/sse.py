"""An incremental Server-Sent Events decoder: bytes in, events out.

Follows the WHATWG "event stream interpretation": lines end with CRLF, LF or CR;
``data`` lines are joined with ``\\n``; ``event`` names the event (default
``message``); ``id`` persists across events (a value holding NUL is ignored);
``retry`` takes only ASCII digits; lines starting with ``:`` are comments; a
single space after the colon is dropped; an event with no ``data`` line is not
dispatched; a byte-order mark at the very start is skipped. Chunks may split the
stream anywhere, inside a CRLF pair or a UTF-8 sequence included: lines are cut
on bytes and decoded only when whole (invalid UTF-8 becomes U+FFFD).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class SSEEvent:
    event: str
    data: str
    id: str | None = None
    retry: int | None = None


class SSEDecoder:
    """Feed it bytes as they arrive; it returns the events completed by each chunk."""

    def __init__(self) -> None:
        self._pending = b""  # bytes of an unfinished line
        self._started = False  # the BOM check has been done
        self._event = ""
        self._data: list[str] = []
        self._has_data = False
        self._last_id: str | None = None
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events whose blank line is in ``chunk``."""
        if not chunk:
            return []
        buf = self._pending + chunk if self._pending else chunk
        if not self._started:
            if len(buf) < len(_BOM) and _BOM.startswith(buf):
                self._pending = buf
                return []
            self._started = True
            if buf.startswith(_BOM):
                buf = buf[len(_BOM) :]
        events: list[SSEEvent] = []
        pos = 0
        end = len(buf)
        search = _LINE_END.search
        while True:
            m = search(buf, pos)
            if m is None:
                break
            # A CR at the very end may be the first half of a CRLF: wait for more.
            if m.end() == end and buf[m.start() : m.end()] == b"\r":
                break
            self._line(buf[pos : m.start()], events)
            pos = m.end()
        self._pending = buf[pos:]
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream. A lone CR still pending ends its line; an event without
        its blank line is discarded, as the standard says."""
        events: list[SSEEvent] = []
        if self._pending.endswith(b"\r"):
            self._line(self._pending[:-1], events)
        self._pending = b""
        self._event = ""
        self._data = []
        self._has_data = False
        return events

    def _line(self, raw: bytes, events: list[SSEEvent]) -> None:
        if not raw:
            self._dispatch(events)
            return
        line = raw.decode("utf-8", "replace")
        if line[0] == ":":
            return
        name, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._has_data = True
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)
        # other field names are ignored

    def _dispatch(self, events: list[SSEEvent]) -> None:
        retry, self._retry = self._retry, None
        if not self._has_data:
            self._event = ""
            return
        events.append(
            SSEEvent(
                event=self._event or "message",
                data="\n".join(self._data),
                id=self._last_id,
                retry=retry,
            )
        )
        self._event = ""
        self._data = []
        self._has_data = False
