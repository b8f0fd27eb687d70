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
import logging
import os
import signal
from typing import Any

import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from .. import __version__
from ..statedir import log_to_file, open_state_dir
from ..tasks.identity import owner_token
from ..tasks.start import start_manager
from .face import SPECS, Face, UnknownTool
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
        async with stdio_server() as (read_stream, write_stream):
            serving = asyncio.ensure_future(
                server.run(read_stream, write_stream, server.create_initialization_options())
            )

            def on_signal() -> None:
                if not stopping:
                    stopping.append(asyncio.ensure_future(stop_on_signal(serving)))

            for sig in _SIGNALS:
                loop.add_signal_handler(sig, on_signal)
            await serving
    except BaseException:
        if not stopping:
            raise
        # Stopping: the transport may fail meanwhile (a message read after the
        # server stopped listening); that must not end the process first.
    if stopping:
        await stopping[0]  # it ends the process
    await finish()  # stdin closed: the client left
    return 0


_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
