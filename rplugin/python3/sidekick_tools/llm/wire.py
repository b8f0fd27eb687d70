"""The JSON both provider kinds write and read: request bodies made of bytes
encoded before (a long chat's turns are encoded once and joined), stream events,
error bodies."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..text import loads_json
from .errors import StreamError
from .sse import SSEEvent


@dataclass(frozen=True)
class RawJSON:
    """A value of a request body already encoded, in pieces to join (a long chat's
    messages: each turn's bytes, made once, joined once into the body)."""

    pieces: list[bytes]


def json_bytes(value: Any) -> bytes:
    """``value`` as compact JSON, key order as built, not ASCII-escaped, in UTF-8
    (text that cannot be encoded, like a lone surrogate from a damaged buffer,
    becomes "?")."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8", "replace")


def json_array(items: Sequence[bytes]) -> list[bytes]:
    """The pieces of the JSON array of ``items``, values already encoded."""
    pieces = [b"["]
    for item in items:
        pieces += (item, b",")
    pieces[-1:] = [b"]"] if items else [b"[", b"]"]
    return pieces


def encode_json(body: dict[str, Any]) -> bytes:
    """Request body bytes, as :func:`json_bytes` makes them; a :class:`RawJSON`
    value goes in as it is, so the bytes are those of the body with that value
    decoded in its place."""
    pieces = [b"{"]
    for key, value in body.items():
        pieces += (json_bytes(key), b":")
        if isinstance(value, RawJSON):
            pieces += value.pieces
        else:
            pieces.append(json_bytes(value))
        pieces.append(b",")
    pieces[-1:] = [b"}"] if body else [b"{", b"}"]
    return b"".join(pieces)


def parse_event_json(event: SSEEvent) -> Any:
    """An event's data as JSON, or a StreamError naming the event."""
    try:
        return loads_json(event.data)
    except ValueError:
        snippet = event.data[:120]
        raise StreamError(
            f'The provider sent an event that is not JSON ("{event.event}": {snippet!r})',
            kind="malformed",
        ) from None


def json_error_body(body: bytes) -> dict[str, Any] | None:
    """An error response body as a JSON object, if it is one."""
    try:
        value = loads_json(body.decode("utf-8", "replace"))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
