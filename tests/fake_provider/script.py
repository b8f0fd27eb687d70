"""What the fake provider answers: replies made of high-level pieces, or HTTP errors.

A script is a list of items, one per request, in order. A :class:`Reply` is a list
of pieces (``text``, ``tool_call``, ``thinking``, ``redacted_thinking``,
``stream_error``) that the server turns into the exact event sequence of whichever
protocol the request used, with options for chunking, pace, a dropped connection
or a stream that hangs. An :class:`HttpError` answers with the provider's JSON
error shape. Scripts can also be read from JSON (see :func:`script_from_json`).
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Union


@dataclass(frozen=True)
class TextPiece:
    text: str


@dataclass(frozen=True)
class ToolCallPiece:
    name: str
    input: dict[str, Any]
    id: str | None = None  # None: the server makes one (toolu_… / call_…)


@dataclass(frozen=True)
class ThinkingPiece:
    text: str
    signature: str | None = None  # None: the server signs the text (see fake_signature)


@dataclass(frozen=True)
class RedactedThinkingPiece:
    data: str


@dataclass(frozen=True)
class StreamErrorPiece:
    """An ``error`` event at this point of the stream; the stream ends after it."""

    error_type: str = "overloaded_error"
    message: str = "Overloaded"


@dataclass(frozen=True)
class RawPiece:
    """Bytes written as they are, for streams no real provider sends (malformed events),
    or keep-alives (`paced`: sent on the reply's schedule, like a delta)."""

    data: bytes
    paced: bool = False


Piece = Union[
    TextPiece, ToolCallPiece, ThinkingPiece, RedactedThinkingPiece, StreamErrorPiece, RawPiece
]


@dataclass
class Reply:
    pieces: list[Piece]
    stop_reason: str | None = None  # None: tool_use when it has calls, else end_turn
    input_tokens: int = 25
    output_tokens: int | None = None  # None: one per delta sent
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    chunk: int = 8  # characters per text/thinking/JSON delta; 0: each piece whole
    wire_chunk: int | None = None  # cut the body into writes of this many bytes
    # pace: one delta per 1/rate s, kept on a schedule from the first delta (so
    # rates above the event loop's 1 ms timer resolution hold on average)
    tokens_per_second: float | None = None
    drop_after: int | None = None  # close the connection after this many events
    hang_after: int | None = None  # send this many events, then wait for the client to go
    interleave_calls: bool = False  # OpenAI: alternate the argument deltas of parallel calls
    raw_body: bytes | None = None  # send these bytes as the whole 200 body instead
    # text replaced, in each event as it is written, by the monotonic clock in
    # microseconds (``time.monotonic_ns() // 1000``): how the bench times a delta's
    # way from the wire into the buffer
    stamp: str | None = None


@dataclass
class HttpError:
    status: int
    error_type: str | None = None  # None: the provider's usual type for the status
    message: str | None = None
    retry_after: float | None = None
    headers: dict[str, str] = field(default_factory=dict)
    echo_key: bool = False  # put the request's API key in the message and a header


#: A script item: a reply, an error, or a function of the request's JSON body that
#: returns one (a scripted model that looks at what it was sent, as the demo's does).
ScriptItem = Union[Reply, HttpError, Callable[[Any], Union[Reply, HttpError]]]


def text(value: str) -> TextPiece:
    return TextPiece(value)


def tool_call(name: str, input: dict[str, Any], id: str | None = None) -> ToolCallPiece:
    return ToolCallPiece(name, dict(input), id)


def thinking(value: str, signature: str | None = None) -> ThinkingPiece:
    return ThinkingPiece(value, signature)


def redacted_thinking(data: str) -> RedactedThinkingPiece:
    return RedactedThinkingPiece(data)


def stream_error(
    error_type: str = "overloaded_error", message: str = "Overloaded"
) -> StreamErrorPiece:
    return StreamErrorPiece(error_type, message)


def raw(data: bytes, paced: bool = False) -> RawPiece:
    return RawPiece(data, paced)


def reply(*pieces: Piece | str, **options: Any) -> Reply:
    """A reply from pieces; a bare string is a text piece."""
    return Reply([TextPiece(p) if isinstance(p, str) else p for p in pieces], **options)


def http_error(status: int, message: str | None = None, **options: Any) -> HttpError:
    return HttpError(status, message=message, **options)


def split_text(text: str, size: int) -> list[str]:
    """``text`` in deltas of ``size`` characters (one piece when ``size`` is 0)."""
    if size <= 0 or len(text) <= size:
        return [text]
    return [text[i : i + size] for i in range(0, len(text), size)]


def fake_signature(thinking_text: str) -> str:
    """The signature the fake gives thinking it did not get one for; it checks it back."""
    digest = hashlib.sha256(b"sidekick-fake-provider\0" + thinking_text.encode()).digest()
    return base64.b64encode(digest).decode()


def _piece(raw: Any) -> Piece:
    if isinstance(raw, str):
        return TextPiece(raw)
    if "text" in raw:
        return TextPiece(raw["text"])
    if "tool_call" in raw:
        call = raw["tool_call"]
        return ToolCallPiece(call["name"], dict(call.get("input") or {}), call.get("id"))
    if "thinking" in raw:
        return ThinkingPiece(raw["thinking"], raw.get("signature"))
    if "redacted_thinking" in raw:
        return RedactedThinkingPiece(raw["redacted_thinking"])
    if "stream_error" in raw:
        err = raw["stream_error"] or {}
        return StreamErrorPiece(
            err.get("type", "overloaded_error"), err.get("message", "Overloaded")
        )
    raise ValueError(f"unknown script piece: {raw!r}")


_REPLY_OPTIONS = set(Reply.__dataclass_fields__) - {"pieces"}


def script_from_json(items: list[Any]) -> list[ScriptItem]:
    """Script items from JSON values:

    ``"Hello"`` (a text reply), ``{"text": "..."}``, ``{"tool_call": {...}}``,
    ``{"pieces": [...], "chunk": 4, "tokens_per_second": 50, ...}`` (any Reply
    option), ``{"error": {"status": 429, "retry_after": 1, "message": "..."}}``.
    """
    out: list[ScriptItem] = []
    for raw in items:
        if isinstance(raw, dict) and "error" in raw:
            err = dict(raw["error"])
            status = int(err.pop("status"))
            if "type" in err:
                err["error_type"] = err.pop("type")
            out.append(HttpError(status, **err))
        elif isinstance(raw, dict) and "pieces" in raw:
            options = {k: v for k, v in raw.items() if k in _REPLY_OPTIONS}
            out.append(Reply([_piece(p) for p in raw["pieces"]], **options))
        else:
            out.append(Reply([_piece(raw)]))
    return out


def load_script(path: str | Path) -> list[ScriptItem]:
    return script_from_json(json.loads(Path(path).read_text()))
