"""The chat loop (DESIGN §10): send the chat, stream the reply in, run its calls,
send the results back, until the model answers without tools or needs the user.

One `Session` per chat buffer that has talked to a model. Its reply streams into
a region of the buffer anchored by an extmark range (Lua keeps it through the
user's edits elsewhere); reply_stream.py writes it, at most one edit per
frame, never waiting for an answer. When the reply ends, its calls
run under the same consent rules as :SidekickRunTool (the policy approves, or
the loop stops at the call with ▶ until the user runs or denies it); once every
call has a result (a running one counts) the loop sends again, up to
`chat.max_turns` replies per user message.

Completion notices of tasks that end while a reply streams or its calls are
unresolved wait (a notice never lands between a call and its result); they are
written when the chat is idle, and with `chat.send_on_notice` sent.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from . import unanswered
from .chain import CallChain, UserError
from .context import CallContext
from .writer import ResultWriter, log_failure

# outbound, reply_stream and llm (and the chat's block model under them) are
# imported by the first send: a host that only runs tools starts without them.

log = logging.getLogger(__name__)


@dataclass
class Session:
    buf: int
    cwd: str
    armed: bool = False  # after the calls' results, the loop sends again by itself
    turns: int = 0  # model replies since the user's last :SidekickSend
    streaming: asyncio.Task[Any] | None = None
    stopping: bool = False
    mark: int | None = None  # the reply region's extmark (its ASSISTANT: line)
    notices: list[list[str]] = field(default_factory=list)  # waiting to be written
    sending: bool = False  # a send is being prepared (not streaming yet)
    # :SidekickStop was the user's last word: nothing goes to the model by
    # itself (not even a notice) until they send again
    halted: bool = False
    # :SidekickSend came while calls of the last reply were running: the
    # user's message goes once each has its result
    send_queued: bool = False
    # the providers on this machine the user let this chat go to (or True:
    # any), as their last :SidekickSend said: what the loop sends by itself
    # goes nowhere else without the question
    trusted: Any = None

    @property
    def busy(self) -> bool:
        return self.streaming is not None or self.sending


class ChatLoop:
    def __init__(self, ctx: CallContext, writer: ResultWriter, chain: CallChain) -> None:
        self.ctx = ctx
        self.writer = writer
        self.chain = chain
        self.sessions: dict[int, Session] = {}
        self._client: Any = None
        self._bg: set[asyncio.Future[Any]] = set()
        # called with the buffer once a reply has ended (its calls are complete:
        # their states are drawn again)
        self.on_reply_end: Callable[[int], None] = lambda _buf: None

    # -- the user's commands ---------------------------------------------------------
    async def send(self, buf: int, cwd: str, trusted: Any = None) -> dict[str, Any]:
        """:SidekickSend: pending calls of the last reply are denied (the user
        replied instead, or went on without them), then the chat goes to the
        model: one request. Calls whose result is on its way (they run, or
        wait their turn in a batch) are not denied: the send waits for them.
        A chat whose front matter names a server on this machine is answered
        with a question first (`outbound.local_question`; `trusted`: the
        providers the user chose for it, or True), and nothing else is done."""
        session = self.sessions.setdefault(buf, Session(buf, cwd))
        if session.busy:
            raise UserError(
                "sidekick_tools: a reply is still streaming into this chat; :SidekickStop ends it"
            )
        from . import outbound

        # Busy from here: the loop must not send by itself meanwhile, not even
        # for the denials written next, which complete the reply's calls (one
        # :SidekickSend is one request).
        session.sending = True
        try:
            # a bad model is said at once
            answer = outbound.model_of(await self.chain.marks.mirror(buf), self.ctx.config)
            question = await outbound.local_question(answer, trusted, self.ctx.config)
            if question is not None:
                session.sending = False
                return {**answer, "confirm": question}
            session.trusted = trusted
            session.cwd = cwd
            session.turns = 0
            session.armed = True
            session.halted = False
            session.send_queued = False
            await unanswered.deny_pending(self.chain, buf)
            running = await unanswered.running_calls(self.chain, buf)
        except BaseException:
            session.sending = False
            raise
        if session.halted:  # :SidekickStop while the pending calls were denied
            session.sending = False
            self.ctx.port.notify_user("sidekick_tools: stopped; the chat was not sent", "info")
            return answer
        if running:
            # Not denied: they run. Their results come by themselves, and the
            # first `result_written` after the last of them sends.
            session.sending = False
            session.send_queued = True
            names = ", ".join(running[:3]) + (" …" if len(running) > 3 else "")
            self.ctx.port.notify_user(
                f"sidekick_tools: {names} still running; the chat is sent once "
                f"{'they have' if len(running) > 1 else 'it has'} a result",
                "info",
            )
            return answer
        # The editor waits for this answer: the request is built and sent after it
        self._spawn(self._send_or_say(session))
        return answer

    async def _send_or_say(self, session: Session) -> None:
        """A send the user asked for, after its answer: a problem is said."""
        try:
            await self._send(session)
        except UserError as exc:
            session.armed = False
            self.ctx.port.notify_user(str(exc), "error")
        except Exception:  # nobody waits for this answer any more: say it
            log.exception("chat %d: sending failed", session.buf)
            session.armed = False
            self.ctx.port.notify_user(
                "sidekick_tools: sending failed (an internal error; details in the host log)",
                "error",
            )

    def stop(self, buf: int) -> dict[str, Any]:
        """:SidekickStop: close the stream at once, keep what arrived, and disarm
        the loop. Tasks keep running; the chat stays valid."""
        session = self.sessions.get(buf)
        if session is None:
            return {"stopped": False, "message": "sidekick_tools: nothing to stop in this chat"}
        session.armed = False
        session.halted = True
        queued, session.send_queued = session.send_queued, False
        streaming = session.streaming is not None
        if session.streaming is not None:
            session.stopping = True
            session.streaming.cancel()
        if streaming:
            message = "sidekick_tools: reply stopped"
        elif queued:
            message = (
                "sidekick_tools: send cancelled: the chat will not go when the running "
                "calls have their results (:SidekickSend sends it)"
            )
        else:
            message = "sidekick_tools: the loop will not send again by itself"
        return {"stopped": True, "message": message}

    def closed(self, buf: int, name: str) -> None:
        """Chat `buf` was closed (unloaded, wiped) while a reply streamed into
        it: the reply cannot be written, so its stream stops at once (nothing
        more is asked of the provider, nor paid for), and the user is told."""
        session = self.sessions.get(buf)
        if session is None or session.streaming is None:
            return
        self.stop(buf)
        chat = os.path.basename(name) if name else f"buffer {buf}"
        self.ctx.port.notify_user(
            f"sidekick_tools: the reply streaming into {chat} was stopped: its chat was "
            "closed, and what had arrived is not written; open it and :SidekickSend again",
            "warn",
        )

    def busy(self, buf: int) -> bool:
        """A reply streams into `buf`, or its calls are not all answered yet:
        completion notices wait."""
        session = self.sessions.get(buf)
        if session is None:
            return False
        if session.busy:
            return True
        mirror = self.ctx.port.mirrors.get(buf)
        return mirror is not None and bool(mirror.chat().unanswered())

    def streaming(self, buf: int) -> bool:
        """A reply streams into `buf` now."""
        session = self.sessions.get(buf)
        return session is not None and session.streaming is not None

    def armed(self, buf: int) -> bool:
        """The loop sends again by itself once the last reply's calls have results."""
        session = self.sessions.get(buf)
        return session is not None and session.armed

    def notice(self, buf: int, lines: list[str]) -> bool:
        """A completion notice for a chat that talks to a model: the loop writes
        it once the chat is idle (and sends it). False: not such a chat."""
        session = self.sessions.get(buf)
        if session is None:
            return False
        session.notices.append(lines)  # the task's final block, written next, wakes the loop
        return True

    # -- a result was written: the loop may go on ---------------------------------------
    def result_lost(self, buf: int) -> None:
        """A call's result will not come (its block was deleted, or a batch
        dropped it): a send waiting for it goes now or is given up, not left
        for some later result to set off."""
        session = self.sessions.get(buf)
        if session is not None and session.send_queued:
            self.result_written(buf)

    def result_written(self, buf: int) -> None:
        session = self.sessions.get(buf)
        if session is None or session.busy:
            return
        self._spawn(self._continue(session))

    async def _continue(self, session: Session) -> None:
        """Every call of the last reply has a result: write the notices that
        waited, then send again if the loop is armed (or a notice arrived and
        `send_on_notice`), unless the user is writing their own message."""
        mirror = await self.ctx.port.mirror(session.buf)
        if mirror is None and not session.busy:
            # The chat was closed: nothing goes by itself, neither now nor
            # when it is opened again (a result written then, its task's that
            # ran unseen, would send it, the user's last word long past).
            if session.send_queued:
                self.ctx.port.notify_user(
                    "sidekick_tools: the chat was closed; it was not sent (:SidekickSend sends it)",
                    "warn",
                )
            session.send_queued = session.armed = False
            return
        if mirror is None or session.busy:
            return
        missing = mirror.chat().unanswered()
        if missing:
            if session.send_queued and not any(
                self.chain.marks.coming(session.buf, c) for c in missing
            ):
                # what is left needs the user (an undone denial, say): the send
                # does not wait for it, nor go when they deal with it later
                session.send_queued = session.armed = False
                ids = ", ".join(c.call_id or f"line {c.start_row + 1}" for c in missing[:3])
                self.ctx.port.notify_user(
                    f"sidekick_tools: the chat was not sent: {ids} without a result; "
                    "run or deny, then :SidekickSend",
                    "warn",
                )
            return
        noticed = await self._flush_notices(session)
        if session.send_queued:  # the user's own :SidekickSend, waiting for these results
            session.send_queued = False
            if not session.busy:
                await self._send_or_say(session)
            return
        chat_cfg = self._chat_cfg()
        want = (session.armed and chat_cfg["auto_send"]) or (
            noticed and chat_cfg["send_on_notice"] and not session.halted
        )
        if not want:
            return
        mirror = await self.ctx.port.mirror(session.buf)
        if session.busy:  # the user sent meanwhile: that send is the one request
            return
        if mirror is None or unanswered.user_typing(mirror.chat(), mirror.lines):
            if want and session.armed:
                self.ctx.port.notify_user(
                    "sidekick_tools: results are in; your message goes with them on :SidekickSend",
                    "info",
                )
            session.armed = False
            return
        limit = int(chat_cfg["max_turns"])
        if session.turns >= limit:
            session.armed = False
            self.ctx.port.notify_user(
                f"sidekick_tools: {limit} replies in a row (chat.max_turns): the loop stops "
                "here; :SidekickSend goes on",
                "warn",
            )
            return
        session.armed = True
        try:
            await self._send(session)
        except UserError as exc:
            session.armed = False
            self.ctx.port.notify_user(str(exc), "error")

    async def _flush_notices(self, session: Session) -> bool:
        if not session.notices:
            return False
        notices, session.notices = session.notices, []
        done = await asyncio.gather(
            *(self.writer.write_notice(session.buf, lines) for lines in notices)
        )
        return any(done)

    # -- sending -----------------------------------------------------------------------
    async def _send(self, session: Session) -> dict[str, Any]:
        from . import outbound

        session.sending = True
        try:
            request = await outbound.build(self.chain.marks, session.buf, self.ctx.config)
            where = {"model": request.model_spec, "provider": request.provider.name}
            if await outbound.local_question(where, session.trusted, self.ctx.config):
                # the user's own send asked already: this is the loop's, or a notice's
                raise UserError(
                    f"sidekick_tools: not sent by itself: this chat's front matter names "
                    f"{request.model_spec}, a server on this machine; :SidekickSend asks first"
                )
            client: Any = None
            try:
                key = await outbound.api_key(self.ctx.port, request.provider)
            except UserError as exc:  # said in the chat under the reply, as HTTP errors are
                key, client = None, _NoKey(str(exc).removeprefix("sidekick_tools: "))
            mark = await outbound.open_reply(
                self.ctx.port, self.chain.marks, session.buf, self.ctx.registry.new_mark()
            )
        finally:
            session.sending = False
        session.mark = mark
        session.turns += 1
        session.stopping = False
        session.streaming = asyncio.ensure_future(self._stream(session, request, key, client))
        session.streaming.add_done_callback(log_failure)
        return {"model": request.model_spec, "provider": request.provider.name}

    # -- streaming -----------------------------------------------------------------------
    async def _stream(
        self, session: Session, request: Any, key: str | None, client: Any = None
    ) -> None:
        from .reply_stream import ReplyStream

        try:
            end = await ReplyStream(self.ctx.port, session).run(
                client or self.client(), request, key
            )
        finally:
            session.streaming = None
            self.on_reply_end(session.buf)
        if end.error is not None:
            session.armed = False
            self.ctx.port.notify_user(f"sidekick_tools: {end.error}", "error")
        elif end.stopped:
            session.armed = False
        await self._after_reply(session, end.call_ids)

    async def _after_reply(self, session: Session, call_ids: list[str]) -> None:
        """Run the reply's calls as the policy allows; the loop goes on from the
        last result written (`result_written`). A reply without calls ends the
        loop: the chat is idle (notices that waited are written, and sent with
        `send_on_notice`)."""
        if not call_ids:
            session.armed = False
            await self._continue(session)
            return
        if not session.armed:  # stopped or failed: its calls wait for the user
            return
        mirror = await self.chain.marks.mirror(session.buf)
        # the reply's own calls: those of the last assistant message (an id the
        # model reused from an earlier call must not reach that call)
        reply_message = mirror.chat().last_assistant()
        waiting = [c for c in (reply_message.calls if reply_message else []) if c.pending]
        first = waiting[0] if waiting else None
        if first is None:
            return
        stopped_at = await self.chain.run_unasked(session.buf, first, session.cwd)
        if stopped_at is not None:
            self.ctx.port.notify_user(
                f"sidekick_tools: {stopped_at.tool} {stopped_at.call_id} needs your consent: "
                ":SidekickRunTool runs it, :SidekickDeny refuses it",
                "warn",
            )

    def client(self) -> Any:
        """The HTTP client, made again when setup() changed its timeouts or its
        tries (a stream under way keeps reading through the one it began with)."""
        from ..llm import ChatClient, ChatConfig

        settings = ChatConfig.from_dict(self._chat_cfg())
        wanted = (settings.timeouts, settings.max_attempts)
        current = self._client
        if current is None or (current.timeouts, current.max_attempts) != wanted:
            self._client = ChatClient(timeouts=wanted[0], max_attempts=wanted[1])
            if current is not None and not any(s.busy for s in self.sessions.values()):
                self._spawn(current.aclose())
        return self._client

    def _chat_cfg(self) -> dict[str, Any]:
        from . import outbound

        return outbound.chat_settings(self.ctx.config)

    def _spawn(self, coro: Any) -> None:
        fut = asyncio.ensure_future(coro)
        self._bg.add(fut)
        fut.add_done_callback(self._bg.discard)
        fut.add_done_callback(log_failure)


class _NoKey:
    """The client of a send whose key could not be had: its stream fails at
    once with why, so the chat says it under the reply as it says a provider's
    error (DESIGN §10), and the user is told."""

    def __init__(self, why: str) -> None:
        self.why = why

    async def stream(self, *_: Any) -> AsyncIterator[Any]:
        from ..llm import LLMError

        raise LLMError(self.why)
        yield  # pragma: no cover - an async generator that yields nothing
