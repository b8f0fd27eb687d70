"""Process output as text: the one cleaner every layer uses.

Tasks write whatever they like; what reaches the chat, a summary, a notice or
an MCP answer is cleaned here, the same way everywhere:

- terminal escape sequences removed (7- and 8-bit CSI, OSC, DCS/SOS/PM/APC
  strings, other ESC sequences, a lone ESC; an unterminated string ends at the
  end of its line);
- CRLF becomes LF, and a line redrawn with lone CRs (a progress bar) keeps what
  a terminal would show last: its last non-empty segment;
- for a buffer (`for_buffer`), binary data is named instead of shown, and the
  remaining control characters other than tab and newline are dropped.
"""

from __future__ import annotations

import json
import re
from typing import Any, AnyStr

_ANSI = (
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"  # CSI: ESC [ or the 8-bit form
    r"|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)?"  # OSC, to BEL, ST or the end of the line
    r"|\x1b[PX^_][^\x1b\n]*(?:\x1b\\)?"  # DCS, SOS, PM, APC
    r"|\x1b[ -/]*[0-~]"  # any other escape: intermediates and one final byte
    r"|\x1b"  # a lone ESC
)
ANSI_RE = re.compile(_ANSI)
ANSI_BYTES_RE = re.compile(_ANSI.encode())

# C0 controls except tab and newline, DEL, and C1 controls (CR is dealt with first).
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]+")
_SNIFF = 8192
# Control bytes that do not occur in text output (tab, LF, CR and ESC do).
_BINARY_CONTROLS = bytes(b for b in [*range(0x20), 0x7F] if b not in b"\t\n\r\x1b")


def decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def strip_ansi(text: str) -> str:
    # Every escape starts with ESC or the 8-bit CSI: without either (most
    # output) looking costs far less than the regex scan.
    if "\x1b" not in text and "\x9b" not in text:
        return text
    return ANSI_RE.sub("", text)


def _last_segment(line: str) -> str:
    for segment in reversed(line.split("\r")):
        if segment:
            return segment
    return ""


def normalize_newlines(text: str) -> str:
    """CRLF -> LF; a line redrawn with lone CRs keeps its last non-empty segment."""
    if "\r" not in text:
        return text
    text = text.replace("\r\n", "\n")
    if "\r" not in text:
        return text
    return "\n".join(_last_segment(line) if "\r" in line else line for line in text.split("\n"))


def clean(text: str) -> str:
    """Escape sequences removed and carriage returns resolved."""
    return normalize_newlines(strip_ansi(text))


# At most this much of a word cut by a length bound is dropped with it.
_CUT_WORD_MAX = 4096


def after_cut(text: AnyStr) -> AnyStr:
    """What follows a cut through `text`'s start (str or bytes), from the first
    white space on: the word the cut went through may be the end of a secret,
    which masking, seeing no start, would not know (a 256 KiB tail showed
    `03-Q7wER…` of an `sk-ant-api03-…` key). Up to 4 KiB of a word is dropped."""
    for i in range(min(len(text), _CUT_WORD_MAX)):
        if text[i : i + 1].isspace():
            return text[i:]
    return text[_CUT_WORD_MAX:]


def before_cut(text: AnyStr) -> AnyStr:
    """`after_cut` for a cut through `text`'s end: up to its last white space."""
    for i in range(len(text) - 1, max(-1, len(text) - 1 - _CUT_WORD_MAX), -1):
        if text[i : i + 1].isspace():
            return text[: i + 1]
    return text[: max(0, len(text) - _CUT_WORD_MAX)]


def is_binary(data: bytes) -> bool:
    """A NUL byte, or more than 30 % control characters other than tab, LF, CR
    and ESC, within the first 8 KiB."""
    sample = data[:_SNIFF]
    if b"\x00" in sample:
        return True
    controls = len(sample) - len(sample.translate(None, _BINARY_CONTROLS))
    return controls * 10 > len(sample) * 3


def for_buffer(data: bytes) -> str:
    """Process output as text fit for a buffer: binary named (`[binary output: N
    bytes not shown]`), else decoded (U+FFFD for invalid UTF-8), cleaned, and
    the remaining control characters except tab and newline dropped."""
    if not data:
        return ""
    if is_binary(data):
        return f"[binary output: {len(data)} bytes not shown]"
    return _CONTROLS.sub("", clean(decode(data)))


# A JSON escape of half a surrogate pair (a lone "\ud800") decodes to a str no
# UTF-8 can carry: to Neovim, into a buffer or a file, it is an error at the end.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_lone_surrogates(value: Any) -> Any:
    """`value` (parsed JSON) with each lone surrogate replaced by U+FFFD, in place
    where it can be; iterative, for JSON nested as deep as the parser allowed."""

    def clean(item: Any) -> Any:
        if isinstance(item, str):
            return _LONE_SURROGATE.sub("\ufffd", item)
        if isinstance(item, (list, dict)):
            todo.append(item)
        return item

    todo: list[Any] = []
    value = clean(value)
    while todo:
        container = todo.pop()
        if isinstance(container, list):
            container[:] = [clean(item) for item in container]
        else:
            items = [(clean(key), clean(item)) for key, item in container.items()]
            container.clear()
            container.update(items)
    return value


class DuplicateKey(ValueError):
    """An object of JSON text names one key twice (`loads_json(unique=True)`)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return value


def loads_json(text: str, unique: bool = False) -> Any:
    """`json.loads` for text from outside (a provider, a chat): no lone surrogates
    in its strings; with `unique`, no object names a key twice (JSON would take
    the last, which a reader of the text may not see: `DuplicateKey`)."""
    value = json.loads(text, object_pairs_hook=_unique_keys) if unique else json.loads(text)
    return _without_lone_surrogates(value) if _SURROGATE_ESCAPE.search(text) else value
