"""Send a :class:`~.request.ChatRequest` and stream the reply as neutral deltas.

Runs on the host's asyncio loop with httpx2 (imported on first use, so the rest
of the plugin works without it). One :class:`ChatClient` per host keeps
connections warm. ``ChatClient.stream(request, api_key)`` is an async generator:

* HTTP 4xx/5xx raise ProviderError with the provider's own message;
* 429, 503, 529 and ``overloaded_error``/``rate_limit_error`` are retried (up to
  ``max_attempts`` tries) after the wait the provider asked for (``retry-after``,
  ``retry-after-ms``) or a growing backoff; each retry is reported to ``on_retry``
  first. Only a reply that has yielded no content yet is retried;
* a dropped connection, a timeout (connect, or a silence longer than the read
  timeout, keep-alive events such as pings included: they are not content, nor
  are usage counts, stop reasons or empty text, see `_answers`), an
  event that does not parse, or a reply larger than MAX_REPLY_BYTES raise
  StreamError; every delta received before is already out;
* cancelling the task that iterates (or closing the generator) closes the
  connection at once.

No message raised here holds the key: the server's words are masked with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import random
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Callable

from ..chat.blocks import (
    Delta,
    RedactedThinkingDelta,
    SignatureDelta,
    TextDelta,
    ThinkingDelta,
    ToolCallArgs,
    ToolCallStart,
)
from ..defaults import default
from ..secrets_mask import mask
from .errors import MissingDependency, ProviderError, StreamError
from .request import ChatRequest
from .settings import Timeouts
from .sse import SSEDecoder

#: A provider asking for a longer wait than this is not retried; its error is shown.
MAX_RETRY_WAIT = 60.0
# A reply's bytes at most: the largest replies models give are a few MB (thinking
# included); past this the server is not answering, it is flooding.
MAX_REPLY_BYTES = 16 << 20
#: Deltas that are part of the answer: once one is out, a failure is not retried.
_CONTENT = (
    TextDelta,
    ThinkingDelta,
    SignatureDelta,
    RedactedThinkingDelta,
    ToolCallStart,
    ToolCallArgs,
)
_ERROR_BODY_LIMIT = 65536


def _answers(delta: Delta) -> bool:
    """Whether ``delta`` is part of the answer: content with something in it.
    Usage counts, a stop reason and empty text are not: a server that sends
    only those is timed out like one that only pings."""
    if isinstance(delta, (TextDelta, ThinkingDelta)):
        return bool(delta.text)
    if isinstance(delta, SignatureDelta):
        return bool(delta.signature)
    if isinstance(delta, ToolCallArgs):
        return bool(delta.fragment)
    return isinstance(delta, _CONTENT)


def httpx() -> Any:
    """The httpx2 module, or a MissingDependency error saying how to get it."""
    if sys.version_info < (3, 10):
        raise MissingDependency(
            f"Talking to a model needs Python 3.10 or later (the host runs "
            f"{sys.version_info[0]}.{sys.version_info[1]}): set setup({{ python = ... }}) to a "
            f"newer interpreter, or run :SidekickInstall with one on PATH"
        )
    try:
        import httpx2
    except ImportError:
        raise MissingDependency(
            "Talking to a model needs the Python package httpx2: run :SidekickInstall, "
            "or install it into the host's Python (pip install 'httpx2>=2.14')"
        ) from None
    return httpx2


@dataclass(frozen=True)
class RetryNotice:
    attempt: int  # the attempt that failed (1-based)
    max_attempts: int
    delay: float  # seconds until the next attempt
    reason: str  # the provider's message


def default_backoff(attempt: int) -> float:
    """Seconds to wait after failed attempt ``attempt`` when the provider names none."""
    return min(8.0, 0.5 * 2 ** (attempt - 1)) * random.uniform(0.8, 1.2)


def retry_after(headers: Any) -> float | None:
    """The wait a response asks for: ``retry-after-ms``, or ``retry-after`` in
    seconds or as an HTTP date."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class ChatClient:
    """Owns the HTTP connection pool; create one per host, close it at exit."""

    def __init__(
        self,
        *,
        timeouts: Timeouts | None = None,
        max_attempts: int | None = None,  # None: option chat.max_attempts's default
        backoff: Callable[[int], float] = default_backoff,
        sleep: Callable[[float], Any] = asyncio.sleep,
    ) -> None:
        self.timeouts = timeouts or Timeouts()
        if max_attempts is None:
            max_attempts = int(default("chat.max_attempts"))
        self.max_attempts = max(1, max_attempts)
        self._backoff = backoff
        self._sleep = sleep
        self._client: Any = None

    def _http(self) -> Any:
        if self._client is None:
            lib = httpx()
            t = self.timeouts
            self._client = lib.AsyncClient(
                timeout=lib.Timeout(connect=t.connect, read=t.read, write=t.read, pool=t.connect)
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    async def stream(
        self,
        request: ChatRequest,
        api_key: str | None,
        on_retry: Callable[[RetryNotice], None] | None = None,
    ) -> AsyncIterator[Delta]:
        """The reply's deltas, as they arrive. See the module docstring for errors."""
        client = self._http()
        headers = {**request.http.headers, **request.kind.auth_headers(api_key)}
        literals = (api_key,) if api_key else ()
        attempt = 0
        while True:
            attempt += 1
            content_seen = False
            try:
                async for delta in self._attempt(client, request, headers, literals):
                    if isinstance(delta, _CONTENT):
                        content_seen = True
                    yield delta
                return
            except ProviderError as error:
                delay = self._retry_delay(error, attempt, content_seen)
                if delay is None:
                    if self._may_retry(error, attempt, content_seen):
                        # the one reason left: the wait it asks for is too long
                        error.message += (
                            f"; it asked to wait {error.retry_after:g}s, longer than the "
                            f"{MAX_RETRY_WAIT:g}s the plugin waits: send again later"
                        )
                    raise
                if on_retry is not None:
                    on_retry(RetryNotice(attempt, self.max_attempts, delay, error.message))
                await self._sleep(delay)

    def _may_retry(self, error: ProviderError, attempt: int, content_seen: bool) -> bool:
        return error.retryable and not content_seen and attempt < self.max_attempts

    def _retry_delay(self, error: ProviderError, attempt: int, content_seen: bool) -> float | None:
        if not self._may_retry(error, attempt, content_seen):
            return None
        if error.retry_after is not None:
            return error.retry_after if error.retry_after <= MAX_RETRY_WAIT else None
        return self._backoff(attempt)

    async def _attempt(
        self, client: Any, request: ChatRequest, headers: dict[str, str], literals: tuple
    ) -> AsyncIterator[Delta]:
        lib = httpx()
        where = request.provider.name
        try:
            async with contextlib.AsyncExitStack() as stack:
                # the answer's headers whole within connect + read timeout: httpx
                # times each read, and a byte each few seconds kept it waiting for days
                opening = stack.enter_async_context(
                    client.stream(
                        "POST", request.http.url, headers=headers, content=request.http.body
                    )
                )
                try:
                    response = await asyncio.wait_for(
                        opening, self.timeouts.connect + self.timeouts.read
                    )
                except asyncio.TimeoutError:
                    raise StreamError(
                        f"{where} did not finish sending its headers within "
                        f"{self.timeouts.connect + self.timeouts.read:g} s: the reply timed out",
                        kind="timeout",
                    ) from None
                if response.status_code >= 400:
                    raise await self._status_error(request, response, literals, self.timeouts.read)
                decoder = request.kind.decoder()
                sse = SSEDecoder()
                head = b""  # the body's start, to quote when it is no event stream
                events = size = 0
                loop = asyncio.get_running_loop()
                content_at = loop.time()  # when the last delta came
                async for chunk in response.aiter_bytes():
                    if len(head) < 300:
                        head += chunk[:300]
                    size += len(chunk)
                    if size > MAX_REPLY_BYTES:
                        raise StreamError(
                            f"{where} sent more than {MAX_REPLY_BYTES / (1 << 20):g} MiB: "
                            "the reply was stopped there",
                            kind="malformed",
                        )
                    for event in sse.feed(chunk):
                        events += 1
                        for delta in self._decode(decoder, event, literals):
                            if _answers(delta):
                                content_at = loop.time()
                            yield delta
                    if decoder.done:
                        return
                    if loop.time() - content_at > self.timeouts.read:
                        raise StreamError(
                            f"{where} sent only keep-alive events for {self.timeouts.read:g} s: "
                            "the reply timed out",
                            kind="timeout",
                        )
                for event in sse.close():
                    events += 1
                    for delta in self._decode(decoder, event, literals):
                        yield delta
                if not events and head.strip():
                    quoted = mask(head[:300].decode("utf-8", "replace").strip(), literals)
                    raise StreamError(
                        f"{where} answered without an event stream: {quoted}", kind="malformed"
                    )
                if not decoder.complete:
                    raise StreamError(
                        f"The connection to {where} closed before the reply was complete",
                        kind="dropped",
                    )
        except lib.ConnectTimeout:
            raise StreamError(
                f"Could not connect to {where} within {self.timeouts.connect:g} s", kind="timeout"
            ) from None
        except lib.TimeoutException:
            raise StreamError(
                f"{where} sent nothing for {self.timeouts.read:g} s: the reply timed out",
                kind="timeout",
            ) from None
        except lib.ConnectError as exc:
            raise StreamError(
                f"Could not connect to {where} ({request.provider.base_url}): "
                f"{mask(str(exc), literals) or type(exc).__name__}",
                kind="connect",
            ) from None
        except lib.TransportError:
            raise StreamError(
                f"The connection to {where} broke before the reply was complete", kind="dropped"
            ) from None

    @staticmethod
    def _decode(decoder: Any, event: Any, literals: tuple) -> list[Delta]:
        try:
            return decoder.decode(event)
        except ProviderError as error:
            raise ProviderError(
                _cut(mask(error.message, literals)),
                status=error.status,
                error_type=error.error_type,
                retry_after=error.retry_after,
            ) from None
        except StreamError as error:
            raise StreamError(_cut(mask(error.message, literals)), error.kind) from None

    @staticmethod
    async def _status_error(
        request: ChatRequest, response: Any, literals: tuple, within: float
    ) -> ProviderError:
        """The provider's error, from as much of its body (64 KiB at most) as
        comes within `within` seconds: dripped, it never ended."""
        body = b""

        async def read() -> None:
            nonlocal body
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) >= _ERROR_BODY_LIMIT:
                    break

        try:
            await asyncio.wait_for(read(), within)
        except asyncio.TimeoutError:
            pass  # what came is what is said
        status = response.status_code
        error_type, message = request.kind.error_of(status, body)
        if not message:
            message = body[:300].decode("utf-8", "replace").strip() or response.reason_phrase
        detail = f"{message} ({error_type})" if error_type else message
        return ProviderError(  # masked, then cut: cut first, a key's start was shown
            _cut(mask(f"{request.provider.name} answered HTTP {status}: {detail}", literals)),
            status=status,
            error_type=error_type,
            retry_after=retry_after(response.headers),
        )


# The most of a provider's error message that is said (a note in the chat, a
# notification): a hostile one sent 11 MB in one.
ERROR_CHARS = 2000


def _cut(text: str) -> str:
    if len(text) <= ERROR_CHARS:
        return text
    return f"{text[:ERROR_CHARS]}… ({len(text) - ERROR_CHARS} characters more)"


async def stream_reply(
    request: ChatRequest,
    api_key: str | None,
    on_retry: Callable[[RetryNotice], None] | None = None,
    **client_options: Any,
) -> AsyncIterator[Delta]:
    """One request on a client of its own (tests, scripts); the host keeps a ChatClient."""
    client = ChatClient(**client_options)
    try:
        async for delta in client.stream(request, api_key, on_retry):
            yield delta
    finally:
        await client.aclose()
