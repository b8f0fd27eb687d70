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

from .errors import StreamError

_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class SSEEvent:
    event: str
    data: str
    id: str | None = None
    retry: int | None = None


# A line or an event larger than this ends the stream (StreamError): a model's
# deltas are small, and a server that never ends a line must not fill the host.
MAX_LINE = 1 << 20
MAX_EVENT = 16 << 20


class SSEDecoder:
    """Feed it bytes as they arrive; it returns the events completed by each chunk.

    Only the new chunk is searched for line ends: a long line costs its length
    once, not once per chunk."""

    def __init__(self) -> None:
        self._pending = bytearray()  # bytes of an unfinished line
        self._cr = False  # the last chunk ended with CR: a LF starting the next is its pair
        self._started = False  # the BOM check has been done
        self._event = ""
        self._data: list[str] = []
        self._data_size = 0
        self._has_data = False
        self._last_id: str | None = None
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events whose blank line is in ``chunk``."""
        if not chunk:
            return []
        if not self._started:
            buf = bytes(self._pending) + chunk
            if len(buf) < len(_BOM) and _BOM.startswith(buf):
                self._pending = bytearray(buf)
                return []
            self._started = True
            self._pending = bytearray()
            chunk = buf[len(_BOM) :] if buf.startswith(_BOM) else buf
        events: list[SSEEvent] = []
        pos = 0
        if self._cr:
            self._cr = False
            if chunk[:1] == b"\n":
                pos = 1
        end = len(chunk)
        search = _LINE_END.search
        while pos < end:
            m = search(chunk, pos)
            if m is None:
                break
            line = chunk[pos : m.start()]
            if self._pending:
                line = bytes(self._pending) + line
                self._pending = bytearray()
            self._line(line, events)
            pos = m.end()
            if pos == end and m.group() == b"\r":
                self._cr = True
        if pos < end:
            if len(self._pending) + end - pos > MAX_LINE:
                raise StreamError(
                    f"The model server sent a line longer than {MAX_LINE >> 20} MiB", "malformed"
                )
            self._pending += chunk[pos:]
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream. An unfinished line and an event without its blank line
        are discarded, as the standard says."""
        self._pending = bytearray()
        self._cr = False
        self._event = ""
        self._data = []
        self._data_size = 0
        self._has_data = False
        return []

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
            self._data_size += len(value)
            if self._data_size > MAX_EVENT:
                raise StreamError(
                    f"The model server sent an event larger than {MAX_EVENT >> 20} MiB",
                    "malformed",
                )
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
        self._data_size = 0
        self._has_data = False
