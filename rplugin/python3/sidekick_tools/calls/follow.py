"""Following tasks: a call's state while its task is queued or runs, its final
block and completion notice when a task that outlived its call's wait ends,
and the running blocks of a reopened chat.

The engine's events arrive here; Lua gets a `task` event for each (the task
list, notifications, the statusline) and a `call` state for the call that
started it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from .. import tools
from ..chat.parser import parse
from ..chat.render import notice_lines
from ..chat.states import fields_detail, names_task
from ..secrets_mask import mask
from ..tasks.identity import owner_gone
from ..tasks.model import TaskStatus, is_token
from ..tools.base import ToolResult
from .context import CallContext
from .registry import Tracked
from .writer import ResultWriter, log_failure

log = logging.getLogger(__name__)

# Seconds between looks at the Neovims that run tasks of chats open here.
ELSEWHERE_POLL = 1.0
# A final result longer than this (characters) is not kept for a reload to
# take back (`Tracked.final`): a task's is had again from its task.
FINAL_KEEP = 256 * 1024


class TaskFollower:
    def __init__(self, ctx: CallContext, writer: ResultWriter) -> None:
        self.ctx = ctx
        self.writer = writer
        self._bg: set[asyncio.Future[Any]] = set()
        # A chat that talks to a model hands its notices to the chat loop, which
        # writes them once no reply streams and every call has its result, then
        # sends them (DESIGN §10, steering). True: the loop took the notice.
        self.hold: Callable[[int, list[str]], bool] = lambda _buf, _lines: False
        # Outside the loop the same rule: the notices of a chat whose last reply
        # has calls without a result (pending, or in their first wait) wait
        # here, in the order their tasks ended, and follow those results.
        self.waiting: dict[int, list[list[str]]] = {}
        # Running blocks of chats open here whose task another Neovim runs, and
        # writes the end of, by buffer: their tokens, and their calls. Once that
        # Neovim is gone: an end it wrote is said to be in the file (`written_
        # elsewhere(buf, call_id, state)`), never written into this older text
        # again; else nobody will write it: `reopen(buf)` follows them anew.
        self.elsewhere: dict[int, dict[str, str]] = {}
        self.reopen: Callable[[int], None] = lambda _buf: None
        # Ends a gone Neovim wrote, by buffer and token (the state to show):
        # never written into this older text, also when its chat is looked at
        # again for another block, until the chat is read anew (`:e`).
        self.left: dict[int, dict[str, tuple[str, str]]] = {}
        self.written_elsewhere: Callable[[int, str, tuple[str, str]], None] = (
            lambda _buf, _call, _state: None
        )
        self._looking_elsewhere = False
        ctx.tasks.subscribe(self.on_task_event)

    # -- a call's state as its task moves --------------------------------------------
    def on_task_event(self, event: Any) -> None:
        task = event.task
        self.ctx.port.emit(
            {
                "type": "task",
                "kind": event.kind,
                "finished": event.kind == "finished",
                "task": task_view(task),
            }
        )
        if event.kind in ("started", "finished"):
            self._refresh_queue()
        tracked = self.ctx.registry.for_task(task)
        if tracked is None:
            return
        self.ctx.registry.bind(tracked, task.id)
        if task.status is TaskStatus.QUEUED:
            self.ctx.registry.state(tracked, "queued", ahead=self.ctx.tasks.queue_position(task.id))
        elif task.status is TaskStatus.RUNNING and not tracked.done:
            self._running(tracked, task)
        elif event.kind == "finished" and tracked.background and not tracked.finishing:
            self._spawn(self.finish(tracked, task))

    def result_written(self, tracked: Tracked, result: ToolResult) -> None:
        """A call's result is in the buffer: its state follows (a running block
        keeps the call following its task), and notices waiting for it go in."""
        if tracked.buf in self.waiting:
            self._spawn(self._write_waiting(tracked.buf))
        if result.status != "running":
            tracked.done = True
            tracked.final = result if len(result.body) <= FINAL_KEEP else None
            tracked.unsaved = True
            self.ctx.registry.state(tracked, result.status, detail=result_detail(result))
            return
        task = self.ctx.tasks.get(tracked.token) if tracked.token else None
        if task is not None and task.status is TaskStatus.QUEUED:
            self.ctx.registry.state(tracked, "queued", ahead=self.ctx.tasks.queue_position(task.id))
        else:
            self._running(tracked, task)

    def _running(self, tracked: Tracked, task: Any) -> None:
        self.ctx.registry.state(
            tracked,
            "running",
            started_at=task.started_at,
            progress=task.progress,
            progress_text=task.progress_text,
        )

    def _refresh_queue(self) -> None:
        """The queue moved: each queued call's "N ahead" changes."""
        for ahead, token in enumerate(self.ctx.tasks.queued_tokens()):
            tracked = self.ctx.registry.by_token(token)
            if tracked is not None and tracked.state == "queued":
                self.ctx.registry.state(tracked, "queued", ahead=ahead)

    # -- the end of a task that outlived its call's wait ---------------------------------
    async def delivered(self, tracked: Tracked, result: ToolResult) -> None:
        """The call's result was written; a `running` one makes it follow its task
        (which may have ended meanwhile)."""
        if result.status == "running" and tracked.token:
            tracked.background = True
            task = self.ctx.tasks.get(tracked.token)
            if task is not None and task.terminal:
                await self.finish(tracked, task)

    async def finish(self, tracked: Tracked, task: Any) -> None:
        """The final block and the completion notice, together in one edit."""
        if tracked.done or tracked.finishing:
            return
        tracked.finishing = True
        result = tools.result_from_task(tracked.tool, task)
        result.fields.setdefault("task", task.id)
        # the notice stays short: the last few lines; the block above and the log have the rest
        output = self.writer.shown(result, task, lines=self.ctx.config.notice_lines)
        payload = {
            "id": task.id,
            "status": task.status.value,
            "started_at": _iso(task.started_at),
            "ended_at": _iso(task.ended_at),
            "duration_seconds": _duration(task),
            "exit_code": task.exit_code,
            "output": output,
            "log": task.log_path if task.started_at is not None else None,  # none: never ran
        }
        notice = notice_lines(payload)
        if self.hold(tracked.buf, notice):
            await self.writer.write(tracked, result)
        elif tracked.buf in self.waiting or self._unanswered(tracked.buf):
            self.waiting.setdefault(tracked.buf, []).append(notice)
            if not await self.writer.write(tracked, result):  # said; its notice goes with it
                self._unwait(tracked.buf, notice)
        else:
            await self.writer.write_with_notice(tracked, result, notice)

    def _unwait(self, buf: int, notice: list[str]) -> None:
        waiting = self.waiting.get(buf)
        if waiting and notice in waiting:
            waiting.remove(notice)
            if not waiting:
                del self.waiting[buf]

    def text_settled(self, buf: int) -> None:
        """A chat's text changed (the pending call deleted, a result written by
        hand): notices waiting for it may go in now."""
        if buf in self.waiting and not self._unanswered(buf):
            self._spawn(self._write_waiting(buf))

    def _unanswered(self, buf: int) -> bool:
        mirror = self.ctx.port.mirrors.get(buf)
        return mirror is not None and bool(mirror.chat().unanswered())

    async def _write_waiting(self, buf: int) -> None:
        """The notices waiting for `buf`, once every call of its last reply has a
        result; they go in together, in order, where `notice_edit` puts them."""
        mirror = await self.ctx.port.mirror(buf)
        if mirror is not None and mirror.chat().unanswered():
            return  # a later result brings them
        notices = self.waiting.pop(buf, [])
        if mirror is None:
            log.info("buffer %d closed: %d waiting notices not written", buf, len(notices))
            return
        await asyncio.gather(*(self.writer.write_notice(buf, lines) for lines in notices))

    # -- a chat (re)opened ----------------------------------------------------------
    async def reattach(
        self, buf: int, mirror: Any, prepare: Any, write_ended: bool = True
    ) -> dict[str, tuple[str, str]]:
        """Follow the `status=running task=T` blocks of a (re)opened chat; the
        blocks not followed, by call id: (the state to show, why).

        Only a task this very call started is followed (DESIGN §12): the store
        must name this chat and this call id. A block naming an unknown task or
        another chat's (a forged block, a copied chat) is left as it is; opening
        such a chat rewrites nothing. `prepare(buf, call)` follows a call.
        `write_ended=False` (the block came back by an undo): a task that has
        ended and whose result was written is shown as such, its result not
        written again, so that the undo stands (reopening the chat writes it);
        one whose result never got into the chat (its block was gone when it
        ended) gets it now."""
        unfollowed: dict[str, tuple[str, str]] = {}
        gone: dict[str, bool] = {}  # each other owner looked at once
        self.elsewhere.pop(buf, None)
        for call in mirror.chat().calls:
            if not names_task(call) or self.ctx.registry.get(buf, call.call_id) is not None:
                continue
            token = call.result.fields["task"]
            if token in self.left.get(buf, {}):  # a gone Neovim wrote it: see `left`
                unfollowed[call.call_id] = self.left[buf][token]
                continue
            task = self.ctx.tasks.get(token) if is_token(token) else None
            if task is None:
                unfollowed[call.call_id] = ("failed", f"task {token} not found; not followed")
                continue
            if not task.of_call(mirror.name, call.call_id):
                # short: virtual text is cut at the window's edge, and what to do is last
                why = f"task {token} is not this call's: :SidekickRunTool runs it anew"
                unfollowed[call.call_id] = ("failed", why)
                continue
            if task.terminal and not write_ended and task.delivered:
                why = f"task {token} ended {task.status.value}; its result was undone"
                unfollowed[call.call_id] = (task.status.value, why)
                continue
            if not task.terminal and task.owner != self.ctx.tasks.owner:
                if not owner_gone(task.owner, gone):
                    # the same chat open in the Neovim that runs it: that one
                    # writes its result (here, reloading the file shows it)
                    why = f"task {token} runs in another Neovim, which writes its result"
                    unfollowed[call.call_id] = ("running", why)
                    self.elsewhere.setdefault(buf, {})[token] = call.call_id or ""
                    self._look_elsewhere()
                    continue
                await self.ctx.tasks.adopt_if_orphaned(task)  # its owner died: taken over here
                task = self.ctx.tasks.get(token) or task
            tracked = await prepare(buf, call)
            if tracked is None:  # its block moved away meanwhile: the next look decides
                unfollowed[call.call_id] = ("running", f"task {token}; not followed")
                continue
            tracked.background = True
            self.ctx.registry.bind(tracked, token)
            # Looked at again: it may have ended while `prepare` waited on Neovim,
            # and that end's event came before the call was followed.
            task = self.ctx.tasks.get(token) or task
            if task.terminal:
                await self.finish(tracked, task)
            else:
                self.ctx.registry.state(tracked, "running", started_at=task.started_at)
        return unfollowed

    def _look_elsewhere(self) -> None:
        if not self._looking_elsewhere:
            self._looking_elsewhere = True
            self._spawn(self._watch_elsewhere())

    async def _watch_elsewhere(self) -> None:
        """While a chat open here shows a task another Neovim runs: once that
        Neovim is gone (quit, its task halted; killed, the task running on),
        the chat's running blocks are followed here (the task taken over, or
        its end written), as when the chat is opened."""
        try:
            while self.elsewhere:
                await asyncio.sleep(ELSEWHERE_POLL)
                gone: dict[str, bool] = {}
                for buf, calls in list(self.elsewhere.items()):
                    if self.ctx.port.mirrors.get(buf) is None:
                        continue  # closed, or read anew: opening it looks again
                    tasks = {token: self.ctx.tasks.get(token) for token in calls}
                    if all(t is not None and not owner_gone(t.owner, gone) for t in tasks.values()):
                        continue
                    del self.elsewhere[buf]
                    # the file decides what the gone Neovim wrote: it may have
                    # written an end and not saved, or saved it and died before
                    # its store heard that it was written (`delivered` is buffered)
                    saved: set[str] = set()
                    if any(t is not None and t.terminal for t in tasks.values()):
                        name = self.ctx.port.mirrors[buf].name
                        saved = await asyncio.to_thread(saved_ends, name)
                    unwritten = False
                    for token, task in tasks.items():
                        if task is not None and task.terminal and calls[token] in saved:
                            why = (
                                f"task {token} ended in another Neovim, which wrote its "
                                "result: :e shows it"
                            )
                            state = (task.status.value, why)
                            self.left.setdefault(buf, {})[token] = state
                            self.written_elsewhere(buf, calls[token], state)
                        else:
                            unwritten = True
                    if unwritten:
                        self.reopen(buf)
        finally:
            self._looking_elsewhere = False

    def _spawn(self, coro: Any) -> None:
        fut = asyncio.ensure_future(coro)
        self._bg.add(fut)
        fut.add_done_callback(self._bg.discard)
        fut.add_done_callback(log_failure)


# What Lua shows of a task that may hold a secret (a command with a token in
# it, output in its summary): masked; the raw log stays on disk (0600).
_SHOWN_TEXT = ("label", "command", "call_command", "summary", "error", "progress_text")


def task_view(task: Any) -> dict[str, Any]:
    """A task as Lua gets it (task list, notifications, API): secrets masked."""
    view = task.to_dict()
    for key in _SHOWN_TEXT:
        if isinstance(view.get(key), str):
            view[key] = mask(view[key])
    return view


def result_detail(result: ToolResult) -> str | None:
    """The short text a finished call's diagnostic carries."""
    if result.status == "failed":
        return fields_detail(result.fields) or mask(result.detail or first_line(result.body))[:200]
    if result.status in ("cancelled", "denied"):  # denied: who (Lua words it)
        return str(result.fields.get("reason") or result.status)
    return None


def first_line(body: str) -> str:
    """What a failed result's body leads with."""
    lines = body.strip().splitlines()
    return lines[0] if lines else "failed"


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts))


def _duration(task: Any) -> float | None:
    if task.started_at is None or task.ended_at is None:
        return None
    return round(task.ended_at - task.started_at, 2)


def saved_ends(path: str) -> set[str]:
    """The ids of the calls whose end (a result not running) the chat file
    `path` holds: what a Neovim that is gone wrote there and saved."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
    except (OSError, ValueError):
        return set()
    return {
        c.call_id
        for c in parse(lines).calls
        if c.call_id and c.result is not None and c.result.status != "running"
    }
