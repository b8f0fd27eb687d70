"""Running the tool calls of chat buffers (DESIGN §5-§7).

    context.py   what the parts share: the editor, the registry, the tasks, the settings
    registry.py  the calls this host follows, and their states
    chain.py     what the user runs, and the chain of auto-acceptable calls after it
    batch.py     the calls the user agreed to at once (:SidekickRunTools), and its plan
    unseen.py    a result that never reached its chat, written when the chat is opened
    writer.py    results and notices written into buffers, batched, never lost in silence
    follow.py    tasks' events: states while they run, final blocks and notices when they end
    marking.py   a call's id and extmark, and its block found again by them
    scan.py      the state of every call as the text says it, for diagnostics
    loop.py      the chat loop: send, stream the reply in, run its calls, send again
    unanswered.py  on a send, the last reply's calls that have no result
    reply_stream.py  one reply streamed into its chat's region, frame by frame

`CallRunner` wires them for the host and is what host.py calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from .. import tools
from ..config import Config
from ..tasks.chat_rename import rename_chat
from ..tasks.model import is_token
from . import unseen
from .batch import CallBatch
from .chain import CallChain, UserError
from .context import CallContext
from .follow import ELSEWHERE_POLL, TaskFollower
from .loop import ChatLoop
from .registry import CallRegistry, Tracked
from .scan import DiagnosticScan
from .writer import ResultWriter, log_failure

__all__ = ["CallRunner", "Tracked", "UserError"]


class CallRunner:
    def __init__(self, port: Any, tasks: Any, config: Config) -> None:
        self.registry = CallRegistry(port)
        self.ctx = CallContext(port, self.registry, tasks, config)
        self.writer = ResultWriter(self.ctx)
        self.follower = TaskFollower(self.ctx, self.writer)
        self.chain = CallChain(self.ctx, self.writer, self.follower)
        self.batch = CallBatch(self.chain)
        self.scan = DiagnosticScan(port, self.registry)
        self.loop = ChatLoop(self.ctx, self.writer, self.chain)
        self.follower.hold = self.loop.notice
        self.chain.answers_broken = self.loop.armed
        self.chain.streaming = self.loop.streaming

        def written(tracked: Tracked, result: Any) -> None:
            self.follower.result_written(tracked, result)
            self.loop.result_written(tracked.buf)

        self.writer.on_written = written
        self.writer.on_lost = lambda tracked: self.loop.result_lost(tracked.buf)
        self.chain.dropped = self.loop.result_lost
        self.port = port
        self._reattaching: set[int] = set()
        self.scan.on_running_block = self._reattach_soon
        self.follower.reopen = self._reopen
        self.follower.written_elsewhere = self._written_elsewhere
        self.scan.on_scanned = self.follower.text_settled
        self.scan.on_id_lost = self._give_id_back
        self.scan.on_result_reloaded = self._write_again
        self.scan.streaming = self.loop.streaming
        self.loop.on_reply_end = lambda buf: self.scan.schedule(buf, delay=0)
        port.on_buffer_gone = self._buffer_gone

    def _reopen(self, buf: int) -> None:
        """The Neovim that ran a task of this chat is gone: its running blocks
        are followed here, as on opening; after a look under way (which began
        while that Neovim still ran, and would leave them its)."""
        if buf in self._reattaching:
            asyncio.get_event_loop().call_later(ELSEWHERE_POLL, self._reopen, buf)
            return
        self._reattach_soon(buf, reloaded=True)

    def _written_elsewhere(self, buf: int, call_id: str, state: tuple[str, str]) -> None:
        """A running block here whose end the Neovim that ran it wrote (and is
        gone): shown as ended, with where its result is."""
        self.scan.unfollowed.setdefault(buf, {})[call_id] = state
        self.scan.schedule(buf, delay=0)

    def _buffer_gone(self, buf: int, name: str) -> None:
        self.follower.elsewhere.pop(buf, None)
        self.follower.left.pop(buf, None)
        self.loop.closed(buf, name)

    def _give_id_back(self, tracked: Tracked) -> None:
        fut = asyncio.ensure_future(self.chain.marks.give_id_back(tracked))
        fut.add_done_callback(log_failure)

    def _write_again(self, buf: int, tracked: list[Tracked]) -> None:
        """The text came anew without results written since the chat was saved:
        if that is a reload (`:e!`: the buffer is its file), they are written
        again (with their ids, where those went too), and until each is in,
        its call is not run again. An undo back past a reload comes the same
        way, but leaves the buffer modified: the calls are pending then."""
        calls = [t for t in tracked if not t.writing_again]  # not found so by a scan before
        for t in calls:
            t.writing_again = t.claimed = True
        if calls:
            fut = asyncio.ensure_future(self._write_back(buf, calls))
            fut.add_done_callback(log_failure)

    async def _write_back(self, buf: int, calls: list[Tracked]) -> None:
        try:
            reloaded = not await self.port.modified(buf)  # asked once, before any is written
            for tracked in calls:
                result = tracked.final if reloaded else None
                if reloaded and result is None and tracked.token:
                    task = self.ctx.tasks.get(tracked.token)
                    if task is not None and task.terminal:
                        result = tools.result_from_task(tracked.tool, task)
                        result.fields.setdefault("task", task.id)
                if result is None:
                    self.scan.undone(tracked)
                    continue
                tracked.done, tracked.final = False, None
                await self.chain.marks.give_id_back(tracked)
                self.writer.write(tracked, result)  # one batch: they go in together
            self.scan.schedule(buf, delay=0)
        finally:
            for tracked in calls:
                tracked.writing_again = tracked.claimed = False

    @property
    def config(self) -> Config:
        return self.ctx.config

    @config.setter
    def config(self, config: Config) -> None:
        """`setup()` again: every part reads the new settings from here (the chat
        loop makes its HTTP client again when its timeouts or tries changed)."""
        self.ctx.config = config

    async def run_tool(
        self, buf: int, row: int, cwd: str, gate: Any = None, confirmed: bool = False
    ) -> dict[str, Any]:
        return await self.chain.run_tool(buf, row, cwd, gate, confirmed)

    async def run_tools(
        self, buf: int, cwd: str, gate: Any = None, ids: Iterable[str] | None = None
    ) -> dict[str, Any]:
        return await self.batch.run_tools(buf, cwd, gate, ids)

    async def run_call(self, buf: int, call_id: str, cwd: str, *rest: Any) -> dict[str, Any]:
        """`CallChain.run_call`: the task token to run again, `confirmed`."""
        return await self.chain.run_call(buf, call_id, cwd, *rest)

    async def plan(self, buf: int, cwd: str) -> list[dict[str, Any]]:
        return await self.batch.plan(buf, cwd)

    async def deny(
        self, buf: int, row: int, reason: str = "", cwd: str | None = None
    ) -> dict[str, Any]:
        return await self.chain.deny(buf, row, reason, cwd)

    async def send(self, buf: int, cwd: str, trusted: Any = None) -> dict[str, Any]:
        return await self.loop.send(buf, cwd, trusted)

    def stop(self, buf: int) -> dict[str, Any]:
        return self.loop.stop(buf)

    async def chat_opened(self, buf: int, write_ended: bool = True, read: bool = False) -> None:
        """A chat was (re)opened: follow its running blocks, draw every call's state.
        `read`: its text was read anew from its file (BufReadPost)."""
        if read:
            self.follower.left.pop(buf, None)
        if buf in self._reattaching:
            return
        self._reattaching.add(buf)
        try:
            mirror = await self.chain.marks.mirror(buf)
            self.scan.unfollowed[buf] = await self.follower.reattach(
                buf, mirror, self.chain.marks.prepare, write_ended
            )
            if write_ended:
                await unseen.write_unseen(self.chain, buf)
        finally:
            self._reattaching.discard(buf)
        self.scan.schedule(buf, delay=0)

    def saved(self, buf: int) -> None:
        """Buffer `buf` was written to its file: the results in it are on disk,
        and a reload brings them back by itself (nor does one that replaces
        the file, by `git checkout` say, get them written again)."""
        for tracked in self.registry.in_buffer(buf).values():
            tracked.final, tracked.unsaved = None, False

    def renamed(self, buf: int, name: str) -> None:
        """Buffer `buf` is now file `name` (`:saveas`): its followed calls, and the
        tasks its chat started, go with it. A task names the chat it was started
        from, and a reopened chat follows only its own tasks: without this, a
        running block of a chat saved under a new name was "not this call's"
        once the chat was closed and opened again, and its result never came."""
        mirror = self.port.mirrors.get(buf)
        if mirror is None or not name or mirror.name == name:
            return
        old, mirror.name = mirror.name, name
        tokens = self.registry.rename(buf, name)
        rename_chat(self.ctx.tasks, old, name, tokens)
        self.scan.schedule(buf, delay=0)

    def _reattach_soon(self, buf: int, reloaded: bool = False) -> None:
        """A running block came back into a chat: follow it as when the chat is
        opened. After an undo of its final result (or a paste), an ended task's
        result is left unwritten: writing it would undo the undo, which a redo
        takes back. After a reload (`:e!` of a chat whose result was not saved),
        nothing can redo it: it is written, as when the chat is opened."""
        fut = asyncio.ensure_future(self.chat_opened(buf, write_ended=reloaded))
        fut.add_done_callback(log_failure)

    def token_at(self, buf: int, row: int, own: bool = False) -> str | None:
        """The task of the call at (buf, row), if it has one. `own` (to act on
        it: a halt): only a task this call started, as a reopened chat follows
        only its own (DESIGN §12); a block naming another's (a chat from
        elsewhere, a copied block) is a UserError that names the token."""
        mirror = self.port.mirrors.get(buf)
        call = mirror.chat().call_at(row) if mirror is not None else None
        if call is None:
            return None
        tracked = self.registry.get(buf, call.call_id or "")
        if tracked and tracked.token:
            return tracked.token
        token = call.result.fields.get("task") if call.result else None
        if not token or not own:
            return token or None
        task = self.ctx.tasks.get(token) if is_token(token) else None
        if task is not None and not task.of_call(mirror.name, call.call_id):
            raise UserError(
                f"sidekick_tools: task {token} is not this call's (another chat or call "
                f"started it); to halt it all the same: :SidekickHalt {token}"
            )
        return token
