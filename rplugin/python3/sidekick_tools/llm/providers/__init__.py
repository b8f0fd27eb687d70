"""Provider kinds: one module per wire protocol.

A kind is a module here exporting ``PROVIDER``, an object with the interface of
:class:`ProviderKind`; a config's ``kind = "NAME"`` loads ``providers/NAME.py``.
Adding a kind is adding one module: build the request from the neutral
conversation, decode stream events into neutral deltas, read error bodies.
The JSON they share (request bodies in pieces, events, error bodies) is in
llm/wire.py: this folder holds kinds only (:func:`get_kind` and the health check
list its modules as the kinds there are).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ...chat.blocks import Conversation, Delta, ToolSpec
from ..errors import ConfigError
from ..settings import ProviderConfig, RequestOptions
from ..sse import SSEEvent

_KIND = re.compile(r"[a-z][a-z0-9_]*")


@dataclass
class HttpRequest:
    """One request, ready to send: the API key is added only when it goes out."""

    url: str
    headers: dict[str, str] = field(repr=False)
    body: bytes = field(repr=False)


@dataclass(frozen=True)
class RequestParts:
    """What a request is made of, in neutral form: the conversation (masked), the
    options, the tools the model may call, the provider's endpoint and headers."""

    conversation: Conversation
    options: RequestOptions
    tools: Sequence[ToolSpec]
    provider: ProviderConfig


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

    def build(self, parts: RequestParts) -> HttpRequest:
        """The request ``parts`` make; the same parts give the same bytes."""
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
