"""Reading a task's growing log: `LogFollower` reads only what was appended
since its last poll (line count, the latest progress marker, where the last
`[RESULT]` and prompt lines start), and the summaries that use what it found
(`summarize_file`, `summarize_tail`). Safe in worker threads, one poll at a time.
"""

from __future__ import annotations

import os
import threading
from typing import Union

from ..text import ANSI_BYTES_RE as _ANSI_B
from ..text import clean, decode
from .output import (
    MARKER_BYTES_RE,
    SUMMARY_BYTES,
    SUMMARY_LINES,
    Progress,
    from_last_result,
    prompt_or_tail,
    read_range,
    summary_of,
    tail_bytes,
)

# A partial line longer than this is consumed anyway (no quadratic re-scans of
# newline-free output such as binary data).
MAX_PARTIAL_LINE = 64 * 1024
READ_CHUNK = 1 << 20
ByteBuf = Union[bytes, bytearray]


def _line_start(buf: ByteBuf, pos: int, lo: int = 0) -> int:
    """Start of the line holding `pos` (a LF or CR ends a line), not before `lo`."""
    nl = buf.rfind(b"\n", lo, pos)
    cr = buf.rfind(b"\r", nl + 1 if nl >= 0 else lo, pos)
    cut = max(nl, cr)
    return lo if cut < 0 else cut + 1


def _line_end(buf: ByteBuf, pos: int, hi: int | None = None) -> int:
    """Index of the LF or CR ending the line at `pos`, or `hi` (default: len(buf))."""
    if hi is None:
        hi = len(buf)
    nl = buf.find(b"\n", pos, hi)
    cr = buf.find(b"\r", pos, hi if nl < 0 else nl)
    if cr >= 0:
        return cr
    return hi if nl < 0 else nl


def _only_blanks(prefix: ByteBuf) -> bool:
    return not _ANSI_B.sub(b"", prefix).strip(b" \t")


_scratch = threading.local()


def _scratch_buffer(need: int) -> bytearray:
    """This thread's read buffer, at least `need` bytes (kept for the next poll)."""
    buf = getattr(_scratch, "buf", None)
    if buf is None or len(buf) < need:
        buf = _scratch.buf = bytearray(max(need, READ_CHUNK + MAX_PARTIAL_LINE))
    return buf


class LogFollower:
    """Incremental reader of one growing log file.

    Each `poll()` reads only the bytes appended since the previous one. A
    trailing partial line is kept in memory and completed by the next poll
    (a line that reaches `MAX_PARTIAL_LINE` bytes with no end in sight is
    consumed anyway), so every byte is read from disk once (`bytes_read`
    counts them). Lines end at LF; a CR also ends a line for marker purposes
    (progress bars that redraw with CR work).

    Reading is cheap per byte: `readinto` one reusable per-thread buffer
    (the pending partial line is copied in front of the new bytes, never
    concatenated), `count`/`rfind` with start/end bounds instead of slices,
    and a marker search only when its first byte (`[`, `>`) occurs at all.

    Safe to call from a worker thread; one poll at a time.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.lines = 0  # complete LF-terminated lines consumed
        self.bytes_read = 0  # bytes read from disk, ever
        self.progress: Progress | None = None
        self.result_offset: int | None = None  # file offset of the last [RESULT] line
        # file offset just after the last "> " that starts a line: the agent's
        # last response starts there (the rest of that line included)
        self.prompt_end: int | None = None
        self._pos = 0  # file offset read up to
        self._pending = b""  # partial last line (bytes before _pos)
        self._at_line_start = True  # _pending (or next data) starts a line
        self._lock = threading.Lock()

    @property
    def offset(self) -> int:
        """Bytes consumed as complete lines (what counts and markers cover)."""
        return self._pos - len(self._pending)

    @property
    def position(self) -> int:
        """Bytes read from the file so far (the partial last line included)."""
        return self._pos

    def poll(self, max_bytes: int | None = None) -> bool:
        """Read new bytes (at most `max_bytes` this call); True if progress changed."""
        with self._lock:
            before = self.progress
            try:
                f = open(self.path, "rb", buffering=0)  # noqa: SIM115 (closed by the with below)
            except FileNotFoundError:
                return False
            with f:
                size = os.fstat(f.fileno()).st_size
                if size < self._pos:  # truncated: start over
                    self._reset()
                f.seek(self._pos)
                budget = size - self._pos if max_bytes is None else min(max_bytes, size - self._pos)
                if budget <= 0:
                    return self.progress != before
                while budget > 0:
                    # The pending partial line (< READ_CHUNK bytes, or at most
                    # MAX_PARTIAL_LINE) goes in front of the new bytes.
                    plen = len(self._pending)
                    want = min(READ_CHUNK, budget)
                    buf = _scratch_buffer(plen + want)
                    buf[:plen] = self._pending
                    with memoryview(buf) as view:
                        got = f.readinto(view[plen : plen + want])
                    if not got:
                        break
                    budget -= got
                    self.bytes_read += got
                    self._pos += got
                    self._feed(buf, plen + got)
            return self.progress != before

    def finish(self) -> None:
        """The writer is done: account for a final line without newline."""
        with self._lock:
            if self._pending:
                pending = self._pending
                self._scan(pending, 0, len(pending), self._pos - len(pending))
                self.lines += 1
                self._pending = b""
                self._at_line_start = True

    def _reset(self) -> None:
        self.lines = 0
        self.progress = None
        self.result_offset = self.prompt_end = None
        self._pos = 0
        self._pending = b""
        self._at_line_start = True

    def _feed(self, buf: ByteBuf, n: int) -> None:
        """Consume `buf[:n]`: the pending partial line followed by new bytes."""
        base = self._pos - n  # file offset of buf[0]
        nl = buf.rfind(b"\n", 0, n)
        cr = buf.rfind(b"\r", nl + 1, n)
        cut = max(nl, cr)
        if cut < 0:
            if n <= MAX_PARTIAL_LINE:
                self._pending = bytes(buf[:n])
                return
            end = n  # give up on finding the end of this line
        else:
            end = cut + 1
        self._scan(buf, 0, end, base)
        self.lines += buf.count(b"\n", 0, end)
        self._at_line_start = cut >= 0  # forced: the next bytes continue a line
        self._pending = bytes(buf[end:n])

    def _scan(self, buf: ByteBuf, lo: int, hi: int, base: int) -> None:
        """Find the last progress marker, [RESULT] line and prompt line in
        `buf[lo:hi]`, which starts at file offset `base`."""
        if buf.find(b"[", lo, hi) >= 0:
            progress = self._last_marker(buf, lo, hi, b"[PROGRESS")
            if progress is not None:
                m = MARKER_BYTES_RE.match(progress[1])
                if m is not None:
                    pct = m.group(2)
                    self.progress = Progress(
                        None if pct is None else max(0, min(100, int(pct))),
                        decode(m.group(3)).strip(),
                    )
            result = self._last_marker(buf, lo, hi, b"[RESULT]")
            if result is not None:
                self.result_offset = base + result[0] - lo
        if buf.find(b">", lo, hi) >= 0:
            prompt = self._last_prompt(buf, lo, hi)
            if prompt is not None:
                self.prompt_end = base + prompt - lo

    def _valid_start(self, buf: ByteBuf, lo: int, pos: int) -> int | None:
        start = _line_start(buf, pos, lo)
        if start == lo and not self._at_line_start:
            return None
        return start if start == pos or _only_blanks(buf[start:pos]) else None

    def _last_marker(
        self, buf: ByteBuf, lo: int, hi: int, needle: bytes
    ) -> tuple[int, bytes] | None:
        """The last line that is a marker (`needle` first on it, after blanks):
        its start and its text. Each line is looked at once: only its first
        `needle` can stand at its start (one line holding thousands of them,
        each looked at against the whole line, held the loop 10 s for 64 KB)."""
        end = hi
        while True:
            pos = buf.rfind(needle, lo, end)
            if pos < 0:
                return None
            start = _line_start(buf, pos, lo)
            first = buf.find(needle, start, pos)  # the line's first, when not this one
            for at in (pos, first) if first >= 0 else (pos,):
                found = self._marker_at(buf, lo, hi, at)
                if found is not None:
                    return found
            end = start

    def _marker_at(self, buf: ByteBuf, lo: int, hi: int, pos: int) -> tuple[int, bytes] | None:
        start = self._valid_start(buf, lo, pos)
        if start is None:
            return None
        line = _ANSI_B.sub(b"", bytes(buf[start : _line_end(buf, pos, hi)]))
        return (start, line) if MARKER_BYTES_RE.match(line) else None

    def _last_prompt(self, buf: ByteBuf, lo: int, hi: int) -> int | None:
        end = hi
        while True:
            pos = buf.rfind(b"> ", lo, end)
            if pos < 0:
                return None
            start = _line_start(buf, pos, lo)
            ok = not (start == lo and not self._at_line_start)
            if ok and (start == pos or not _ANSI_B.sub(b"", buf[start:pos])):
                return pos + 2  # the response starts on the prompt's own line
            end = start  # skip the rest of this line
            if end <= lo:
                return None


def summarize_file(
    path: str,
    follower: LogFollower | None = None,
    *,
    max_bytes: int = 64 * 1024,
    max_lines: int = SUMMARY_LINES,
    tail_bytes_: int = SUMMARY_BYTES,
) -> str:
    """`summary_of()` for a log file, reading only a bounded region.

    With a follower that has read the whole file, the region is the last
    `[RESULT]` section (its first `max_bytes`) or what follows the last prompt
    (its last `max_bytes`); otherwise the file's tail.
    """
    if follower is not None and follower.result_offset is not None:
        text = decode(read_range(path, follower.result_offset, max_bytes))
        return summary_of(text, max_lines=max_lines, max_bytes=tail_bytes_)
    if follower is not None and follower.prompt_end is not None:
        size = _size(path)
        start = max(follower.prompt_end, size - max_bytes)
        text = decode(read_range(path, start, max_bytes))
        if clean(text).strip():
            if start > follower.prompt_end:  # cut: drop the partial first line
                text = text.split("\n", 1)[-1]
            return clean(text).strip("\n").rstrip()
    data = tail_bytes(path, max(tail_bytes_ * 2, 4096))
    text = decode(data)
    if len(data) < _size(path) and "\n" in text:  # cut: drop the partial first line
        text = text.split("\n", 1)[1]
    return summary_of(text, max_lines=max_lines, max_bytes=tail_bytes_)


TAIL_WINDOW = 64 * 1024


def summarize_tail(
    path: str,
    follower: LogFollower | None = None,
    *,
    window: int = TAIL_WINDOW,
    max_lines: int = SUMMARY_LINES,
    tail_bytes_: int = SUMMARY_BYTES,
) -> str:
    """The summary of a log that has NOT been read to its end, reading only its
    last `window` bytes (plus, at most, `window` bytes at a known `[RESULT]`).

    Rule: the last `[RESULT]` marker in the tail window, if any (the content
    from it on); else the last `[RESULT]` the follower already saw, if any;
    else the content after the last prompt line (`> `) in the window, if
    non-empty; else the tail. A `[RESULT]` (or prompt) line in the unread
    region before the window is missed: the cost of not reading that region.
    """
    size = _size(path)
    data = tail_bytes(path, window)
    text = decode(data)
    if len(data) < size and "\n" in text:  # cut: drop the partial first line
        text = text.split("\n", 1)[1]
    cleaned = clean(text)
    found = from_last_result(cleaned)
    if found is not None:
        return found
    if follower is not None and follower.result_offset is not None:
        known = decode(read_range(path, follower.result_offset, window))
        return summary_of(known, max_lines=max_lines, max_bytes=tail_bytes_)
    return prompt_or_tail(cleaned, max_lines, tail_bytes_)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
