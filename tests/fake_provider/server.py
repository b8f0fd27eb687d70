"""The fake provider's HTTP server: asyncio, standard library only, loopback.

One server speaks both protocols, by path: ``POST /v1/messages`` is Anthropic,
``POST /v1/chat/completions`` (or ``/chat/completions``) is OpenAI. Each request
takes the next item of the script, is recorded (headers and body), is checked as
the real API would check it (a 400 in the provider's shape when refused), then
answered: a reply streams as SSE in chunked transfer encoding, exactly as the
providers send it. The server notices when a client goes away mid-stream
(``RecordedRequest.disconnected``), which is how tests see a cancel close the
connection.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from . import anthropic_wire, openai_wire
from .script import HttpError, Reply, ScriptItem, ThinkingPiece, fake_signature

ANTHROPIC = "anthropic"
OPENAI = "openai"


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    protocol: str  # "anthropic" | "openai" | ""
    status: int = 0  # what the server answered
    disconnected: bool = False  # the client left before the answer was complete
    received_at: float = field(default_factory=time.monotonic)  # the whole request read
    first_line_at: float = 0.0  # time.monotonic() when its request line had arrived

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class FakeProvider:
    """A scripted, recording fake of the Anthropic and OpenAI streaming APIs.

    ``async with FakeProvider([reply("Hi")]) as fake:`` then point a client at
    ``fake.anthropic_url`` or ``fake.openai_url``. ``api_key`` makes the server
    check the key (401 otherwise). ``repeat`` replays the script forever.
    """

    def __init__(
        self,
        script: Iterable[ScriptItem] = (),
        *,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        repeat: bool = False,
    ) -> None:
        self.script: list[ScriptItem] = list(script)
        self.api_key = api_key
        self.host = host
        self.port = port
        self.repeat = repeat
        self.requests: list[RecordedRequest] = []
        self._next = 0
        self._issued: dict[str, str] = {}  # signature -> thinking text
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[asyncio.Task] = set()
        self._early: dict[int, bytes] = {}

    # --- lifecycle ----------------------------------------------------------

    async def start(self) -> FakeProvider:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._conns):
                task.cancel()
            await asyncio.gather(*self._conns, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> FakeProvider:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def anthropic_url(self) -> str:
        """The ``base_url`` for an Anthropic client (it appends ``/v1/messages``)."""
        return self.base_url

    @property
    def openai_url(self) -> str:
        """The ``base_url`` for an OpenAI client (it appends ``/chat/completions``)."""
        return f"{self.base_url}/v1"

    def push(self, *items: ScriptItem) -> None:
        """Add replies to the end of the script."""
        self.script.extend(items)

    def _take(self) -> ScriptItem | None:
        if self._next >= len(self.script):
            if not (self.repeat and self.script):
                return None
            self._next = 0
        item = self.script[self._next]
        self._next += 1
        return item

    # --- HTTP ---------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            while True:
                request = await self._read_request(reader)
                if request is None:
                    break
                keep = await self._answer(request, reader, writer)
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._conns.discard(task)
            self._early.pop(id(reader), None)
            writer.close()

    async def _read_request(self, reader: asyncio.StreamReader) -> RecordedRequest | None:
        # bytes of this request read while the previous answer watched for a hang-up
        early = self._early.pop(id(reader), b"")
        line = early + await reader.readline()
        first_line_at = time.monotonic()
        if not line.strip():
            return None
        method, path, _ = line.decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while True:
            header = await reader.readline()
            if header in (b"\r\n", b"\n", b""):
                break
            name, _, value = header.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        body = b""
        if "content-length" in headers:
            body = await reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int((await reader.readline()).split(b";")[0], 16)
                chunk = await reader.readexactly(size + 2)
                if size == 0:
                    break
                body += chunk[:-2]
        path = path.split("?", 1)[0]
        protocol = ""
        if method == "POST" and path == "/v1/messages":
            protocol = ANTHROPIC
        elif method == "POST" and path in ("/v1/chat/completions", "/chat/completions"):
            protocol = OPENAI
        return RecordedRequest(method, path, headers, body, protocol, first_line_at=first_line_at)

    async def _answer(
        self, request: RecordedRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Answer one request; False when the connection must end."""
        self.requests.append(request)
        n = len(self.requests)
        if not request.protocol:
            return await self._json(
                writer, request, 404, {"error": {"message": f"no route {request.path}"}}
            )
        key = self._key_of(request)
        if self.api_key is not None and key != self.api_key:
            refusal = HttpError(401, message=self._bad_key_message())
            return await self._error(writer, request, refusal)
        try:
            body = json.loads(request.body)
        except ValueError:
            return await self._error(writer, request, HttpError(400, message="Invalid JSON body"))
        if request.protocol == ANTHROPIC:
            problem = anthropic_wire.check_request(body, self._issued)
        else:
            problem = openai_wire.check_request(body)
        if problem:
            return await self._error(writer, request, HttpError(400, message=problem))
        item = self._take()
        if callable(item):
            item = item(body)
        if item is None:
            message = "fake provider: no scripted reply left for this request"
            return await self._error(writer, request, HttpError(500, message=message))
        if isinstance(item, HttpError):
            if item.echo_key and key:
                item = HttpError(
                    item.status,
                    item.error_type,
                    f"{item.message or 'refused'}; key was {key}",
                    item.retry_after,
                    {**item.headers, "x-echo-key": key},
                )
            return await self._error(writer, request, item)
        if body.get("stream") is not True:
            message = "the fake provider answers streaming requests only (stream: true)"
            return await self._error(writer, request, HttpError(400, message=message))
        return await self._stream(request, reader, writer, item, body, n)

    def _key_of(self, request: RecordedRequest) -> str | None:
        if request.protocol == ANTHROPIC:
            return request.headers.get("x-api-key")
        auth = request.headers.get("authorization", "")
        return auth[7:] if auth.lower().startswith("bearer ") else None

    @staticmethod
    def _bad_key_message() -> str:
        return "invalid x-api-key"

    async def _json(
        self,
        writer: asyncio.StreamWriter,
        request: RecordedRequest,
        status: int,
        payload: Any,
        headers: dict[str, str] | None = None,
    ) -> bool:
        data = json.dumps(payload).encode()
        head = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
            "content-type: application/json",
            f"content-length: {len(data)}",
            f"request-id: req_fake_{len(self.requests):04d}",
            *(f"{k}: {v}" for k, v in (headers or {}).items()),
        ]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)
        await writer.drain()
        request.status = status
        return True

    async def _error(
        self, writer: asyncio.StreamWriter, request: RecordedRequest, error: HttpError
    ) -> bool:
        headers = dict(error.headers)
        if error.retry_after is not None:
            headers["retry-after"] = f"{error.retry_after:g}"
        if request.protocol == OPENAI:
            kind, code = openai_wire.ERROR_TYPES.get(error.status, ("server_error", None))
            message = error.message or f"fake error {error.status}"
            payload = openai_wire.error_body(error.error_type or kind, message, code)
        else:
            kind = anthropic_wire.ERROR_TYPES.get(error.status, "api_error")
            message = error.message or kind.replace("_", " ").capitalize()
            request_id = f"req_fake_{len(self.requests):04d}"
            payload = anthropic_wire.error_body(error.error_type or kind, message, request_id)
        return await self._json(writer, request, error.status, payload, headers)

    async def _stream(
        self,
        request: RecordedRequest,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        reply: Reply,
        body: dict[str, Any],
        n: int,
    ) -> bool:
        model = str(body.get("model"))
        if request.protocol == ANTHROPIC:
            for piece in reply.pieces:
                if isinstance(piece, ThinkingPiece):
                    signature = piece.signature or fake_signature(piece.text)
                    self._issued[signature] = piece.text
            items = anthropic_wire.events(
                reply, model, f"msg_fake_{n:04d}", lambda i: f"toolu_fake_{n:04d}_{i:02d}"
            )
            frames = [(anthropic_wire.sse(name, data), token) for name, data, token in items]
        else:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            items = openai_wire.chunks(
                reply,
                model,
                f"chatcmpl-fake{n:04d}",
                int(time.time()),
                include_usage,
                lambda i: f"call_fake_{n:04d}_{i:02d}",
            )
            frames = [(openai_wire.sse(item), token) for item, token in items]
        if reply.raw_body is not None:
            frames = [(reply.raw_body, False)]
        head = [
            "HTTP/1.1 200 OK",
            "content-type: text/event-stream; charset=utf-8",
            "cache-control: no-cache",
            "transfer-encoding: chunked",
            f"request-id: req_fake_{n:04d}",
        ]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        request.status = 200
        gone = asyncio.ensure_future(reader.read(1))  # completes when the client leaves
        try:
            return await self._send_frames(request, writer, reply, frames, gone)
        finally:
            gone.cancel()
            await asyncio.gather(gone, return_exceptions=True)
            if not gone.cancelled() and gone.exception() is None:
                self._early[id(reader)] = gone.result()  # the next request had begun

    async def _send_frames(
        self,
        request: RecordedRequest,
        writer: asyncio.StreamWriter,
        reply: Reply,
        frames: list[tuple[bytes, bool]],
        gone: asyncio.Future,
    ) -> bool:
        pause = 1 / reply.tokens_per_second if reply.tokens_per_second else 0.0
        stamp = json.dumps(reply.stamp)[1:-1].encode() if reply.stamp else b""
        start, tokens = time.monotonic(), 0
        for count, (frame, token) in enumerate(frames):
            if reply.drop_after is not None and count >= reply.drop_after:
                request.disconnected = False
                writer.transport.abort()  # no final chunk: the body is cut
                return False
            if reply.hang_after is not None and count >= reply.hang_after:
                await writer.drain()
                await gone  # until the client closes the connection
                request.disconnected = True
                return False
            if gone.done():
                request.disconnected = True
                return False
            if stamp:
                frame = frame.replace(stamp, b"%d" % (time.monotonic_ns() // 1000))
            self._write_chunked(writer, frame, reply.wire_chunk)
            await writer.drain()
            if token and pause:
                tokens += 1
                wait = start + tokens * pause - time.monotonic()
                # behind the schedule: the next delta goes at once, after a look
                # at the connection (a client that left is noticed)
                await asyncio.wait({gone}, timeout=max(wait, 0))
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    @staticmethod
    def _write_chunked(writer: asyncio.StreamWriter, data: bytes, size: int | None) -> None:
        pieces = [data] if not size else [data[i : i + size] for i in range(0, len(data), size)]
        for piece in pieces:
            writer.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")


_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
    529: "Overloaded",
}


class ThreadedFakeProvider:
    """The fake in a thread of its own, for synchronous callers (a test driving a
    headless Neovim, the demo, the bench): ``with ThreadedFakeProvider(script) as fake:``."""

    def __init__(self, script: Iterable[ScriptItem] = (), **options: Any) -> None:
        self.fake = FakeProvider(script, **options)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> FakeProvider:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.fake.start(), self._loop).result(10)
        return self.fake

    def __exit__(self, *exc: Any) -> None:
        asyncio.run_coroutine_threadsafe(self.fake.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
