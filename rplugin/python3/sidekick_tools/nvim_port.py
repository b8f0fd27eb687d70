"""The one module that talks to Neovim.

Everything else in the host is asyncio coroutines on pynvim's own event loop.
This port gives them:

- `call()`: a request to Neovim as an awaitable (run in a pynvim greenlet, so
  it never blocks the loop);
- `block_on()`: for RPC handlers (greenlets) that must wait for a coroutine;
- `emit()`: UI events batched into one `nvim_exec_lua` notification per loop turn;
- buffer mirrors kept current by `nvim_buf_attach` line events.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

import greenlet

from .buffers import BufferMirror

log = logging.getLogger(__name__)

EVENTS_LUA = "require('sidekick_tools.bridge').on_events(...)"


EXIT_RUNS = 10  # times the host's exit runs the loop for its last work, at most


class NvimPort:
    def __init__(self, nvim: Any) -> None:
        self.nvim = nvim
        self.loop: asyncio.AbstractEventLoop = nvim.loop
        self._events: list[dict[str, Any]] = []
        self._flush_scheduled = False
        self.mirrors: dict[int, BufferMirror] = {}
        # buffers between nvim_buf_attach and their snapshot: events seen meanwhile
        self._attaching: dict[int, list[list[Any]]] = {}
        self._detached: set[int] = set()  # detached while attaching: attached again
        # the one attach under way per buffer: whoever asks for its mirror
        # meanwhile waits for it (two attaches would share `_attaching`, and
        # the later snapshot would miss the events the earlier one took)
        self._looking: dict[int, asyncio.Future[BufferMirror | None]] = {}
        self._watching: set[asyncio.Future[Any]] = set()
        self.on_buffer_change: Any = None  # callback(buf, first, last) set by the host
        self.on_buffer_gone: Any = None  # callback(buf, name): a mirrored buffer was unloaded

    # -- requests -----------------------------------------------------------
    def call(self, method: str, *args: Any) -> asyncio.Future[Any]:
        """Send a request to Neovim; the future resolves with its answer."""
        fut: asyncio.Future[Any] = self.loop.create_future()

        def run() -> None:
            try:
                result = self.nvim.request(method, *args)
            except Exception as exc:  # delivered to the awaiting coroutine
                if not fut.done():
                    fut.set_exception(exc)
            else:
                if not fut.done():
                    fut.set_result(result)

        self.nvim.async_call(run)
        return fut

    async def lua(self, code: str, *args: Any) -> Any:
        return await self.call("nvim_exec_lua", code, list(args))

    def block_on(self, awaitable: Awaitable[Any]) -> Any:
        """Wait for a coroutine from an RPC handler (a pynvim greenlet).

        The handler's greenlet yields to the loop until the future is done, the
        same way pynvim waits for responses; the editor is never blocked by it
        except for a synchronous rpcrequest that is waiting for this answer.
        """
        fut = asyncio.ensure_future(awaitable, loop=self.loop)
        if fut.done():
            return fut.result()
        current = greenlet.getcurrent()
        if current.parent is None:  # not in a handler (the host's exit): run the loop
            for _ in range(EXIT_RUNS - 1):
                try:
                    return self.loop.run_until_complete(fut)
                except RuntimeError:
                    if fut.done():
                        raise  # the coroutine's own error
                    # pynvim stopped the loop again (a signal, the end of its
                    # stream) before the work was done: it goes on
            return self.loop.run_until_complete(fut)
        fut.add_done_callback(lambda _f: current.switch())
        current.parent.switch()
        return fut.result()

    # -- UI events ------------------------------------------------------------
    def emit(self, event: dict[str, Any]) -> None:
        self._events.append(event)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def take_events(self) -> list[dict[str, Any]]:
        """The events not sent yet, for a reply to carry them instead."""
        events, self._events = self._events, []
        return events

    def _flush(self) -> None:
        self._flush_scheduled = False
        events, self._events = self._events, []
        if events:
            try:
                self.nvim.request("nvim_exec_lua", EVENTS_LUA, [events], async_=True)
            except Exception:  # Neovim went away; nothing to show events to
                log.exception("could not send %d events", len(events))

    def notify_user(self, msg: str, level: str = "info") -> None:
        levels = {"debug": 1, "info": 2, "warn": 3, "error": 4}
        self.emit({"type": "notify", "msg": msg, "level": levels.get(level, 2)})

    # -- buffers ----------------------------------------------------------------
    async def mirror(self, buf: int) -> BufferMirror | None:
        """The mirror of `buf`, attaching to it on first use. None if the buffer is
        not loaded.

        A look already under way is joined. It began before this caller asked,
        and the buffer may have been loaded since (the caller may be answering
        the chat's BufReadPost): when that look finds no buffer, one more look,
        begun after the caller asked, gives the answer."""
        for _ in range(2):
            mirror = self.mirrors.get(buf)
            if mirror is not None and mirror.tick is not None:
                return mirror
            looking = self._looking.get(buf)
            joined = looking is not None and not looking.done()
            if not joined:
                looking = asyncio.ensure_future(self._look(buf))
                self._looking[buf] = looking
                looking.add_done_callback(lambda f: self._looked(buf, f))
            mirror = await asyncio.shield(looking)
            if mirror is not None or not joined:
                return mirror
        return None

    def _looked(self, buf: int, fut: asyncio.Future[Any]) -> None:
        if self._looking.get(buf) is fut:
            del self._looking[buf]

    async def _look(self, buf: int) -> BufferMirror | None:
        """Attach to `buf` (unless its mirror is attached and only lost its tick)
        and make its mirror from a snapshot and the events sent meanwhile."""
        attached = buf in self.mirrors
        for _ in range(3):
            self._attaching[buf] = []
            self._detached.discard(buf)
            try:
                if not attached and not await self._attach(buf):
                    return None
                snap = await self.lua("return require('sidekick_tools.bridge').snapshot(...)", buf)
            finally:  # answered or failed (a buffer wiped meanwhile): its events go on
                early = self._attaching.pop(buf, [])
            if buf not in self._detached:
                break
            attached = False  # detached before the snapshot came: attach again
        else:
            return None
        if not snap:
            self.mirrors.pop(buf, None)
            return None
        mirror = BufferMirror(
            buf=buf, name=snap["name"], lines=list(snap["lines"]), tick=snap["tick"]
        )
        for tick, first, last, data in early:  # on_lines skips what the snapshot holds
            mirror.on_lines(tick, first, last, data)
        self.mirrors[buf] = mirror
        return mirror

    async def _attach(self, buf: int) -> bool:
        """Watch `buf`'s changes; False when it is not loaded. A wiped buffer
        (:bwipeout) is an error to nvim_buf_attach, an unloaded one a False:
        both are a buffer gone, for the caller to say as such."""
        try:
            return bool(await self.call("nvim_buf_attach", buf, False, {}))
        except Exception:
            if await self.call("nvim_buf_is_loaded", buf):
                raise
            return False

    def on_notification(self, name: str, args: list[Any]) -> bool:
        """Handle buffer-update notifications; False if `name` is not one."""
        if name == "nvim_buf_lines_event":
            buf, tick, first, last, data, _more = args
            bufnr = _bufnr(buf)
            if bufnr in self._attaching:
                self._attaching[bufnr].append([tick, first, last, data])
                return True
            mirror = self.mirrors.get(bufnr)
            if mirror is not None:
                mirror.on_lines(tick, first, last, data)
                if self.on_buffer_change:
                    self.on_buffer_change(mirror.buf, first, last)
            return True
        if name == "nvim_buf_changedtick_event":
            buf, tick = args
            mirror = self.mirrors.get(_bufnr(buf))
            if mirror is not None:
                mirror.on_tick(tick)
            return True
        if name == "nvim_buf_detach_event":
            buf = _bufnr(args[0])
            gone = self.mirrors.pop(buf, None)
            if gone is not None:
                # said at once, not only once it is mirrored again: a look at
                # the text meanwhile (the chat's BufReadPost) knows it came anew
                if self.on_buffer_change:
                    self.on_buffer_change(buf, 0, -1)
                self._watch_again(buf, gone.name)
            if buf in self._attaching:
                self._detached.add(buf)
            return True
        return False

    def _watch_again(self, buf: int, name: str) -> None:
        """Neovim stops a buffer's updates when it reloads it (:e!, :checktime),
        and again when an undo goes back past that reload, with no read event
        after it: a buffer still loaded is mirrored again, and looked at anew.
        One that is not (:bdelete, :bwipeout) is gone: `on_buffer_gone`."""

        async def again() -> None:
            try:
                mirror = await self.mirror(buf)
            except Exception as exc:  # wiped meanwhile: nothing to watch
                log.info("buffer %d is no longer there to watch: %s", buf, exc)
                mirror = None
            if mirror is None:
                if self.on_buffer_gone:
                    self.on_buffer_gone(buf, name)
            elif self.on_buffer_change:
                self.on_buffer_change(buf, 0, -1)

        fut = asyncio.ensure_future(again())
        self._watching.add(fut)
        fut.add_done_callback(self._watching.discard)

    async def apply(
        self,
        buf: int,
        tick: int | None,
        edits: list[tuple[int, int, list[str]]],
        marks: list[tuple[int, int]] | None = None,
        anchors: list[tuple[int, int]] | None = None,
    ) -> bool:
        """Apply edits computed from the text as of `tick`; False when the text
        changed since. `anchors` (mark, row) are set before the edits, `marks` after."""
        if tick is None:
            return False
        return bool(
            await self.lua(
                "return require('sidekick_tools.bridge').apply(...)",
                buf,
                tick,
                [list(e) for e in edits],
                [list(m) for m in (marks or [])],
                [list(a) for a in (anchors or [])],
            )
        )

    async def ask_policy(self, tool: str, params: dict[str, Any], ctx: dict[str, Any]) -> Any:
        """The user's auto_accept.policy function's answer for a call (Lua)."""
        return await self.lua(
            "return require('sidekick_tools.bridge').policy(...)", tool, params, ctx
        )

    async def modified(self, buf: int) -> bool:
        """Whether `buf` holds changes its file does not (False: gone, or as read)."""
        return bool(
            await self.lua(
                "local b = ... return vim.api.nvim_buf_is_valid(b) and vim.bo[b].modified", buf
            )
        )

    async def unsaved(self, path: str) -> list[int]:
        """The buffers holding unsaved changes to file `path` (a real path)."""
        bufs = await self.lua("return require('sidekick_tools.bridge').unsaved(...)", path)
        return [int(b) for b in bufs] if isinstance(bufs, list) else []

    def written(self, path: str) -> None:
        """A tool wrote file `path`: the buffers showing it read it again."""
        self.emit({"type": "written", "path": path})

    async def lua_api_key(self, provider: str) -> str | bool | None:
        """An API key a Lua function in the user's config gives (never logged);
        False when the function raised an error, None when it gave no key."""
        key = await self.lua("return require('sidekick_tools.bridge').api_key(...)", provider)
        if isinstance(key, dict) and key.get("raised"):
            return False
        return str(key) if isinstance(key, str) and key else None

    # -- a reply streaming into a chat (calls/loop.py) ------------------------------
    async def reply_open(self, buf: int, mark: int, row: int) -> None:
        await self.lua("require('sidekick_tools.bridge').reply_open(...)", buf, mark, row)

    def reply_edit(self, buf: int, mark: int, edit: list[Any], expect: str, rows: int) -> None:
        """One streamed edit, sent without waiting (a notification): Lua applies
        it relative to the reply's region if the region is as the host left it."""
        try:
            self.nvim.request(
                "nvim_exec_lua",
                "require('sidekick_tools.bridge').reply_edit(...)",
                [buf, mark, edit, expect, rows],
                async_=True,
            )
        except Exception:  # Neovim went away
            log.exception("could not send a reply edit")

    async def reply_close(self, buf: int, mark: int, lines: list[str]) -> bool:
        """The reply's region made exactly `lines` (the last edit, a note under
        it, or everything again if the user's edits made them disagree)."""
        return bool(
            await self.lua(
                "return require('sidekick_tools.bridge').reply_close(...)", buf, mark, lines
            )
        )

    async def mark_rows(self, buf: int, marks: list[int]) -> dict[int, int]:
        rows = await self.lua("return require('sidekick_tools.bridge').mark_rows(...)", buf, marks)
        return {int(k): int(v) for k, v in dict(rows or {}).items()}


def _bufnr(buf: Any) -> int:
    return int(getattr(buf, "number", buf))
