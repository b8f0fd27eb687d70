"""Task output: markers, ANSI stripping, summaries, and incremental log reading.

A task's stdout/stderr are files written by the task itself; this module only
ever reads them, and always in bounded pieces:

- `LogFollower` remembers where it stopped and reads only bytes appended since
  (cost proportional to new output), tracking line count, the latest progress
  marker and where the last `[RESULT]` / prompt line starts, using
  `bytes.count`/`rfind` so that even large volumes stay cheap.
- `read_new()` gives a caller (task_output) the bytes after an offset it keeps.
- `summary_of()` turns a bounded piece of text into the summary shown to the LLM.

Output protocol (a marker starts a line; leading blanks and ANSI codes allowed):
`[PROGRESS] text`, `[PROGRESS:NN] text` (NN percent, clamped to 0..100),
`[RESULT] ...` (start of the final result), `[ERROR] ...`, `[WARNING] ...`.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from re import Pattern
from typing import Union

from ..text import ANSI_BYTES_RE as _ANSI_B
from ..text import clean, decode, strip_ansi

_MARKER_RE = re.compile(
    r"^[ \t]*\[(PROGRESS(?::[ \t]*(\d{1,3})[ \t]*%?)?|RESULT|ERROR|WARNING)\][ \t]?(.*)$"
)
_MARKER_B = re.compile(_MARKER_RE.pattern.encode(), re.S)

SUMMARY_LINES = 50
SUMMARY_BYTES = 8 * 1024
# A partial line longer than this is consumed anyway (no quadratic re-scans of
# newline-free output such as binary data).
MAX_PARTIAL_LINE = 64 * 1024
READ_CHUNK = 1 << 20


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
        # Drop the (probably cut) first line when there is more than one.
        if "\n" in out:
            out = out.split("\n", 1)[1]
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
    found = _from_last_result(text)
    if found is not None:
        return found
    return _prompt_or_tail(text, max_lines, max_bytes)


def _from_last_result(text: str) -> str | None:
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


def _prompt_or_tail(text: str, max_lines: int, max_bytes: int) -> str:
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
            pass  # one line longer than max_bytes: hand it out in pieces
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


def _read_range(path: str, start: int, max_bytes: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read(max_bytes)
    except FileNotFoundError:
        return b""


FilterPattern = Union[str, Pattern[str]]
ByteBuf = Union[bytes, bytearray]


def compile_filter(pattern: FilterPattern) -> Pattern[str]:
    """Compile a filter regex; `/re/` slashes are accepted. Bad regex: ValueError."""
    if not isinstance(pattern, str):
        return pattern
    if len(pattern) >= 2 and pattern.startswith("/") and pattern.endswith("/"):
        pattern = pattern[1:-1]
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid filter regex {pattern!r}: {exc}") from None


def filter_lines(text: str, pattern: FilterPattern) -> list[str]:
    """Lines of `text` matching `pattern` (searched anywhere in the line).

    Pure: it consumes nothing. The caller's "new since last read" offset is
    advanced (or not) by the caller, independently of what the filter hides.
    """
    rx = compile_filter(pattern)
    return [line for line in text.split("\n") if rx.search(line)]


# --------------------------------------------------------------------------- follower


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
                m = _MARKER_B.match(progress[1])
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
        end = hi
        while True:
            pos = buf.rfind(needle, lo, end)
            if pos < 0:
                return None
            start = self._valid_start(buf, lo, pos)
            if start is not None:
                line = _ANSI_B.sub(b"", bytes(buf[start : _line_end(buf, pos, hi)]))
                if _MARKER_B.match(line):
                    return start, line
            end = pos

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
        text = decode(_read_range(path, follower.result_offset, max_bytes))
        return summary_of(text, max_lines=max_lines, max_bytes=tail_bytes_)
    if follower is not None and follower.prompt_end is not None:
        size = _size(path)
        start = max(follower.prompt_end, size - max_bytes)
        text = decode(_read_range(path, start, max_bytes))
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
    found = _from_last_result(cleaned)
    if found is not None:
        return found
    if follower is not None and follower.result_offset is not None:
        known = decode(_read_range(path, follower.result_offset, window))
        return summary_of(known, max_lines=max_lines, max_bytes=tail_bytes_)
    return _prompt_or_tail(cleaned, max_lines, tail_bytes_)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
