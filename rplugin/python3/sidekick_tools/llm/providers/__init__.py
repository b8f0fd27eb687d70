"""Provider kinds: one module per wire protocol.

A kind is a module here exporting ``PROVIDER``, an object with the interface of
:class:`ProviderKind`; a config's ``kind = "NAME"`` loads ``providers/NAME.py``.
Adding a kind is adding one module: build the request from the neutral
conversation, decode stream events into neutral deltas, read error bodies.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...chat.blocks import Conversation, Delta, ToolSpec
from ..errors import ConfigError, StreamError
from ..settings import ProviderConfig, RequestOptions
from ..sse import SSEEvent

_KIND = re.compile(r"[a-z][a-z0-9_]*")


@dataclass
class HttpRequest:
    """One request, ready to send: the API key is added only when it goes out."""

    url: str
    headers: dict[str, str] = field(repr=False)
    body: bytes = field(repr=False)


class StreamDecoder(Protocol):
    """Turns one reply's SSE events into neutral deltas (stateful, one per request)."""

    def decode(self, event: SSEEvent) -> list[Delta]:
        """The deltas in ``event``; raises ProviderError for an ``error`` event and
        StreamError(kind="malformed") for an event that does not parse."""
        ...

    @property
    def done(self) -> bool:
        """The stream's last event has come (``message_stop``, ``[DONE]``): stop reading."""
        ...

    @property
    def complete(self) -> bool:
        """The reply is whole, so a stream that ends here was not cut short (``done``,
        or, for servers that never send ``[DONE]``, a ``finish_reason``)."""
        ...


class ProviderKind(Protocol):
    name: str

    def build(
        self,
        conversation: Conversation,
        options: RequestOptions,
        tools: Sequence[ToolSpec],
        provider: ProviderConfig,
    ) -> HttpRequest:
        """The request for ``conversation``; the same input gives the same bytes."""
        ...

    def auth_headers(self, api_key: str | None) -> dict[str, str]: ...

    def decoder(self) -> StreamDecoder: ...

    def error_of(self, status: int, body: bytes) -> tuple[str, str]:
        """(error type, message) from an HTTP error body; ("", "") when unreadable."""
        ...


def get_kind(kind: str) -> ProviderKind:
    """The provider module for ``kind`` (``anthropic``, ``openai``...)."""
    if _KIND.fullmatch(kind):
        name = f"{__name__}.{kind}"
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # the module exists but lacks something it imports
                raise
            module = None
        provider = getattr(module, "PROVIDER", None)
        if provider is not None:
            return provider
    raise ConfigError(
        f'Unknown provider kind "{kind}": use "anthropic" (Messages API) or "openai" '
        f"(Chat Completions: OpenAI, Ollama, llama.cpp, vLLM, LM Studio, OpenRouter...)"
    )


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
        return json.loads(event.data)
    except ValueError:
        snippet = event.data[:120]
        raise StreamError(
            f'The provider sent an event that is not JSON ("{event.event}": {snippet!r})',
            kind="malformed",
        ) from None


def json_error_body(body: bytes) -> dict[str, Any] | None:
    """An error response body as a JSON object, if it is one."""
    try:
        value = json.loads(body.decode("utf-8", "replace"))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
