"""Talking to models: one module per provider wire protocol, the SSE reader, the
HTTP stream, API keys. See docs/architecture.md, "llm/ and the fake provider".

Only :mod:`.stream` needs httpx2 (Python 3.10+), and it imports it on first use:
this package and everything else in it import on Python 3.9 with no extra
dependency, so tools and tasks keep working there with pynvim alone.

    request = build_request(lines, config["chat"], tools.REGISTRY.values())
    key = await resolve_key(request.provider.api_key)
    renderer = ReplyRenderer()                       # chat/reply_render.py
    async for delta in client.stream(request, key, on_retry=show):   # ChatClient
        renderer.feed(delta)                         # every ~16 ms: renderer.take()
    renderer.finish()
"""

from __future__ import annotations

from typing import Any

from .errors import (
    ChatNotReady,
    ConfigError,
    KeyUnavailable,
    LLMError,
    MissingDependency,
    ProviderError,
    StreamError,
)
from .keys import resolve_key
from .request import ChatRequest, build_request, encode_request
from .settings import ChatConfig, ProviderConfig, RequestOptions, Timeouts

_LAZY = ("ChatClient", "RetryNotice", "stream_reply")


def __getattr__(name: str) -> Any:
    if name in _LAZY:  # the stream module is cheap to import; httpx2 loads on first use
        from . import stream

        return getattr(stream, name)
    raise AttributeError(name)


__all__ = [
    "ChatClient",
    "ChatConfig",
    "ChatNotReady",
    "ChatRequest",
    "ConfigError",
    "KeyUnavailable",
    "LLMError",
    "MissingDependency",
    "ProviderConfig",
    "ProviderError",
    "RequestOptions",
    "RetryNotice",
    "StreamError",
    "Timeouts",
    "build_request",
    "encode_request",
    "resolve_key",
    "stream_reply",
]
