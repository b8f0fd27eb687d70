"""The MCP stdio server: the official SDK's low-level `Server` around `Face`.

The only module that imports the ``mcp`` SDK. Life of one server:

1. open the store Neovim uses (``<state_dir>/tasks.db``), create a TaskManager
   owned by this process (``owner = "<pid>:<start token>"``), and recover
   (reattach the tasks of a server or Neovim that died, as the host does);
2. serve ``tools/list`` and ``tools/call`` over stdin/stdout until stdin
   closes or SIGTERM/SIGINT/SIGHUP arrives;
3. on exit with ``mcp.kill_on_exit`` (default true), halt the tasks of MCP
   clients this server runs (SIGTERM, SIGKILL half a second later), like
   Neovim with ``tasks.kill_on_exit``: the ones its clients started and any
   it took over at start-up. With ``kill_on_exit = false`` they keep running,
   and the next server or Neovim to start reattaches them. A Neovim task it
   took over follows ``tasks.kill_on_exit`` (`Config.halts_on_exit`).

Logs go to ``<state_dir>/mcp.log``, never to stdout (the protocol's channel).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
from collections import deque
from typing import Any

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from .. import __version__
from ..statedir import log_to_file, open_state_dir
from ..tasks.identity import owner_token
from ..tasks.start import start_manager
from .face import SPECS, Face, UnknownTool
from .lines import REFUSED, Lines, Refused, claimed_stdin
from .settings import ConfigSource, Options

log = logging.getLogger(__name__)

INVALID_PARAMS = -32602

INSTRUCTIONS = (
    "Runs shell commands and agent CLIs as background tasks in the task engine of the "
    "sidekick-tools Neovim plugin; the user sees them live in Neovim (:SidekickTasks!). "
    "run and ask wait briefly and answer with the result, or with a task token when the "
    "work takes longer: then call await with the token (repeatedly, each call is bounded "
    "below common client time limits), output for new output, halt to stop it."
)

_READ_ONLY = {"await", "status", "output", "list"}


def _tool(name: str, description: str, schema: dict[str, Any]) -> types.Tool:
    if name in _READ_ONLY:
        hints = types.ToolAnnotations(read_only_hint=True, open_world_hint=False)
    else:
        hints = types.ToolAnnotations(read_only_hint=False, destructive_hint=True)
    return types.Tool(name=name, description=description, input_schema=schema, annotations=hints)


def build_server(face: Face) -> Server[Any]:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[_tool(*t) for t in face.tools()])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        client = _client_name(ctx)
        meta = ctx.meta or {}
        token = meta.get("progress_token", meta.get("progressToken"))

        async def report(progress: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(progress, total, message)

        try:
            answer = await face.call(
                params.name, params.arguments, client, report if token is not None else None
            )
        except UnknownTool as e:
            raise MCPError(code=INVALID_PARAMS, message=str(e)) from None
        except Exception as e:  # a bug of ours: the client gets an error, the server goes on
            log.exception("tool %s failed", params.name)
            text = f"internal error in {params.name}: {type(e).__name__}: {e}"
            return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)
        return types.CallToolResult(
            content=[types.TextContent(text=answer.text)], is_error=answer.is_error
        )

    return Server(
        "sidekick-tools",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        get_tool_input_schema=lambda name: SPECS[name].schema if name in SPECS else None,
    )


_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_surrogates(value: Any) -> Any:
    """`value` (parsed JSON) with each lone surrogate a U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    return value


def _sent(exc: Exception, refused: deque[Refused]) -> Any:
    """What the client sent, from the SDK's error about it: the message as
    Python's json reads it; `_NOTHING` when the error does not hold it. `Refused`
    for a line that is no JSON; `refused`'s next for a line the reader refused
    (one nested past MAX_JSON_DEPTH among them: read no further here)."""
    errors = getattr(exc, "errors", None)
    try:
        found = errors() if callable(errors) else []
    except Exception:
        found = []
    for error in found:
        value = error.get("input")
        if error.get("type") == "json_invalid" and isinstance(value, (str, bytes)):
            line = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            if line == REFUSED and refused:
                raise refused.popleft()
            try:
                return json.loads(line)
            except (ValueError, RecursionError):  # its id cannot be told: null
                raise Refused(types.PARSE_ERROR, "Parse error: the line is not JSON") from None
        loc = error.get("loc", ())
        if len(loc) <= 1 or isinstance(value, dict) and len(loc) <= 2:
            return value  # the message itself (not an object, or a field of it wrong)
    return _NOTHING


_NOTHING = object()  # `_sent`: the error does not hold the message


class MendedReads:
    """The client's messages as the SDK's stdio transport read them, with what
    it could not read looked at again. The SDK drops such a line without an
    answer, and a client waits for one until its own time limit:

    - JSON with a lone surrogate escape ("\\ud800": the SDK's parser refuses
      it, Python's reads it) is read with U+FFFD in its place;
    - a request that is still no valid message is answered "invalid request",
      and a line that is no JSON "parse error" (JSON-RPC 2.0, section 5.1);
    - a line the reader (`lines.Lines`) refused, too long or with an id MCP
      does not allow, is answered with its refusal."""

    def __init__(self, inner: Any, write_stream: Any, refused: deque[Refused]) -> None:
        self._inner = inner
        self._write = write_stream
        self._refused = refused  # the lines the reader refused, in order (`Lines`)

    @property
    def last_context(self) -> Any:  # the SDK runs handlers in the reader's context
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            mended = await self._mend(item)
            if mended is not None:
                return mended

    async def _mend(self, exc: Exception) -> SessionMessage | None:
        try:
            return await self._read_again(exc)
        except Exception:  # a line must never end the session
            log.exception("a message that could not be read was not answered")
            return None

    async def _read_again(self, exc: Exception) -> SessionMessage | None:
        try:
            sent = _sent(exc, self._refused)
        except Refused as refused:
            await self._refuse(refused.rid, refused.code, refused.message)
            return None
        if sent is _NOTHING:
            log.info("a message that could not be read: %r", exc)
            return None
        if not isinstance(sent, dict):  # an array (a batch), a string, a number...
            await self._refuse(None, types.INVALID_REQUEST, "Invalid request: not an object")
            return None
        sent = _without_surrogates(sent)
        try:
            return SessionMessage(types.jsonrpc_message_adapter.validate_python(sent))
        except Exception as e:
            rid = sent.get("id")
            if "method" in sent and "id" in sent:  # a request: answered (a bad id as null)
                count = getattr(e, "error_count", lambda: 1)()
                why = f"Invalid request: not a JSON-RPC request ({count} problems)"
                await self._refuse(rid if _is_id(rid) else None, types.INVALID_REQUEST, why)
            else:  # a malformed response or notification: nothing to answer
                log.info("a message that is not JSON-RPC: %.200r", sent)
            return None

    async def _refuse(self, rid: Any, code: int, message: str) -> None:
        error = types.JSONRPCError(
            jsonrpc="2.0", id=rid, error=types.ErrorData(code=code, message=message)
        )
        await self._write.send(SessionMessage(error))

    def __aiter__(self) -> MendedReads:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> MendedReads:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


def _is_id(value: Any) -> bool:
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def _client_name(ctx: Any) -> str | None:
    params = getattr(ctx.session, "client_params", None)
    info = getattr(params, "client_info", None)
    return getattr(info, "name", None)


async def serve(options: Options) -> int:
    """Serve one client over stdio until it leaves; the process's exit code."""
    state = open_state_dir(options.state_dir)
    log_to_file(os.path.join(state.path, "mcp.log"))
    source = ConfigSource(options)
    manager, _ = start_manager(
        source.current().tasks,
        state,
        owner_token(os.getpid()),
        lambda m: log.error("task store unusable: %s", m),
    )
    await manager.recover()
    face = Face(manager, source, os.getcwd())
    server = build_server(face)
    log.info("MCP server %s started (pid %d, owner %s)", __version__, os.getpid(), manager.owner)
    loop = asyncio.get_running_loop()
    stopping: list[asyncio.Future[None]] = []

    async def finish() -> None:
        # A second signal must not cut the clean-up short: ignore them from here on.
        for sig in _SIGNALS:
            loop.add_signal_handler(sig, lambda: None)
        # Neovim's tasks taken over at start-up follow tasks.kill_on_exit
        config = source.current()
        await manager.shutdown(kill=config.halts_on_exit, owner="the MCP server")
        how = "halted" if config.mcp.kill_on_exit else "left running"
        log.info("MCP server stopped (its clients' running tasks were %s)", how)

    async def stop_on_signal(serving: asyncio.Future[Any]) -> None:
        """The reader of stdin sits in a thread nothing can interrupt, and the
        transport waits for it: the tasks are halted now, and the process ends
        here, whether or not the client ever closes stdin or writes again."""
        log.info("MCP server stopping on a signal")
        serving.cancel()
        await finish()
        logging.shutdown()
        os._exit(0)

    try:
        with claimed_stdin() as fd:
            lines = Lines(fd)
            async with stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
                reads = MendedReads(read_stream, write_stream, lines.refused)
                serving = asyncio.ensure_future(
                    server.run(reads, write_stream, server.create_initialization_options())
                )

                def on_signal() -> None:
                    if not stopping:
                        stopping.append(asyncio.ensure_future(stop_on_signal(serving)))

                for sig in _SIGNALS:
                    loop.add_signal_handler(sig, on_signal)
                await serving
    except BaseException as exc:
        if not stopping:
            if isinstance(exc, Exception):
                # whatever broke the session, its clients' tasks follow kill_on_exit
                if client_gone(exc):  # killed, or it closed its end: no error of ours
                    log.info("MCP server: the client went away (its pipe closed)")
                else:
                    log.exception("MCP server: the session ended on an error")
                await finish()
            raise
        # Stopping: the transport may fail meanwhile (a message read after the
        # server stopped listening); that must not end the process first.
    if stopping:
        await stopping[0]  # it ends the process
    await finish()  # stdin closed: the client left
    return 0


_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def client_gone(exc: BaseException) -> bool:
    """`exc` (or every error of an exception group) says the client's end of
    the pipe closed: the client was killed, or quit without a word."""
    if isinstance(exc, (BrokenPipeError, ConnectionResetError)):
        return True
    inner = getattr(exc, "exceptions", None)
    return bool(inner) and all(client_gone(e) for e in inner)
