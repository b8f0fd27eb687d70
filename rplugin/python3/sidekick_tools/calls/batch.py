"""The calls the user agreed to at once (`:SidekickRunTools`, DESIGN §6): what
would become of each pending call of the last assistant message (`plan`: the
policy approves it, asks, or denies it), and running those agreed to one after
the other, each with the very text the user was shown.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterable
from typing import Any

from ..chat import ToolCall
from ..chat.edits import describe
from ..tools import setup_problem
from ..tools.policy import judge_why, outside_note
from .chain import CallChain
from .marking import UserError
from .registry import Tracked
from .scan import call_problem


class CallBatch:
    def __init__(self, chain: CallChain) -> None:
        self.chain = chain
        self.ctx = chain.ctx

    async def run_tools(
        self,
        buf: int,
        cwd: str,
        gate: asyncio.Future[None] | None = None,
        ids: Iterable[str] | dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Run the pending calls of the last assistant message (only `ids`, when
        given: the ones the user agreed to; with the `seen` digest of the text
        they were shown, a call whose text changed since is not run), one after
        the other."""
        self._refuse_streaming(buf)
        mirror = await self.chain.marks.mirror(buf)
        message = mirror.chat().last_assistant()
        pending = [c for c in (message.calls if message else []) if c.pending]
        changed: list[ToolCall] = []
        if ids is not None:
            seen = ids if isinstance(ids, dict) else dict.fromkeys(ids, "")
            pending = [c for c in pending if c.call_id in seen]
            changed = [
                c
                for c in pending
                if not c.structural  # never run: no matter
                and seen[c.call_id or ""] not in ("", digest(c))
            ]
            pending = [c for c in pending if c not in changed]
        for call in changed:
            self.ctx.port.notify_user(
                f"sidekick_tools: {call.call_id} changed after you were asked; not run", "warn"
            )
        if not pending:
            if changed:
                raise UserError("sidekick_tools: the calls changed after you were asked; none ran")
            raise UserError("sidekick_tools: no pending tool call in the last assistant message")
        chosen: list[tuple[Tracked, ToolCall]] = []  # each call with its text as agreed to
        broken, busy = [], []
        try:
            for call in pending:
                if call.structural:
                    broken.append(call)  # no block can be told apart from another
                    continue
                if self.chain.marks.busy(buf, call):
                    busy.append(call)  # started or denied a moment ago: its result is coming
                    continue
                tracked = await self.chain.marks.prepare(buf, call)
                if tracked is not None:
                    chosen.append((tracked, call))
        except BaseException:
            # taking the next call failed (its chat unloaded): those taken are
            # free again, not left taken for a batch that never runs
            self._release(buf, [t for t, _ in chosen])
            raise
        if not chosen:
            if broken:
                problem = broken[0].error
            elif busy:
                problem = f"{busy[0].call_id} already runs or was denied; its result is coming"
            else:
                problem = "they changed while starting"
            raise UserError(f"sidekick_tools: no pending call can run: {problem}")
        self.chain.spawn(self._run_tracked(buf, chosen, cwd, gate))
        return {"count": len(chosen), "ids": [t.call_id for t, _ in chosen]}

    async def plan(self, buf: int, cwd: str) -> list[dict[str, Any]]:
        """What `run_tools` would do with each pending call of the last assistant
        message: ``verdict`` "approve" (the policy runs it by itself), "ask" (it
        needs the user's consent; a command says ``why``) or "deny" (the policy
        refuses it); a broken call says its ``problem``. Calls written without an
        id get one here, so the user's answer can name them (`run_tools(..., ids)`)."""
        self._refuse_streaming(buf)
        await self.chain.marks.give_ids(buf)
        mirror = await self.chain.marks.mirror(buf)
        message = mirror.chat().last_assistant()
        out = []
        for call in message.calls if message else []:
            if not call.pending:
                continue
            problem = call_problem(call) or setup_problem(call.tool, call.params, self.ctx.config)
            ctx = self.chain.executor.context(cwd, mirror.name, call.call_id or "")
            verdict, why = "ask", None
            if not problem:
                answer = await self.chain.executor.ask_policy(call, ctx)
                verdict, why = await judge_why(call.tool, call.params or {}, ctx, answer)
            out.append(
                {
                    "id": call.call_id or "",
                    "tool": call.tool,
                    "row": call.start_row,
                    "verdict": verdict,
                    "what": describe(call) + outside_note(call.params, cwd, call.tool),
                    "problem": problem or None,
                    "why": why,
                    "seen": digest(call),
                }
            )
        return out

    async def _run_tracked(
        self,
        buf: int,
        chosen: list[tuple[Tracked, ToolCall]],
        cwd: str,
        gate: asyncio.Future[None] | None = None,
    ) -> None:
        """Run the calls one after the other; their results are written as they
        come, several at once when they come together. Each is the very block
        prepared, at its row then (not looked up by id again: an earlier block
        may carry the same id). A call the policy approves runs as it
        would unasked (checked again, hardened, under the auto-run timeout);
        the others run as the user agreed to them."""
        deliveries = []
        started: set[int] = set()  # id() of the followers handed to the executor
        for tracked, _ in chosen[1:]:  # shown waiting their turn, not ▶ to run by hand
            tracked.waiting = True
            self.ctx.registry.state(tracked, "queued")
        try:
            mirror = await self.chain.marks.mirror(buf)
            snapshot = mirror.chat()  # the calls as they were when the user asked
            for tracked, agreed in chosen:
                if self.ctx.registry.live(tracked) is None:
                    continue  # denied (or run on its own) meanwhile: followed anew, not ours
                tracked.waiting = False
                call = snapshot.call_at(tracked.row)  # where it was marked
                if (
                    call is None
                    or call.start_row != tracked.row
                    or call.call_id != tracked.call_id
                    or digest(call) != digest(agreed)  # its text is the one agreed to
                ):
                    self.ctx.registry.forget(tracked)  # moved or changed: its text says its state
                    self.chain.dropped(buf)
                    continue
                started.add(id(tracked))
                result = await self.chain.executor.run(
                    tracked, cwd, explicit=None, found=(mirror, call), gate=gate
                )
                gate = None
                if result is not None:
                    deliveries.append(asyncio.ensure_future(self.chain.deliver(tracked, result)))
        finally:  # the batch stopped early (its chat went away)
            self._release(buf, [t for t, _ in chosen if id(t) not in started])
        if deliveries:
            await asyncio.gather(*deliveries)

    def _release(self, buf: int, taken: list[Tracked]) -> None:
        """Calls a batch took but will not run: none is left "queued", nor taken
        for a run that never comes (one the user denied meanwhile is theirs)."""
        left = [t for t in taken if self.ctx.registry.live(t) is t and not t.answering]
        for tracked in left:
            tracked.waiting = False
            self.ctx.registry.forget(tracked)
        if left:
            self.chain.dropped(buf)

    def _refuse_streaming(self, buf: int) -> None:
        """A streaming reply's calls are not all there yet: none is run as a batch."""
        if self.chain.streaming(buf):
            raise UserError(
                "sidekick_tools: a reply is still streaming into this chat; "
                "run its calls once it has ended"
            )


def digest(call: ToolCall) -> str:
    """A short fingerprint of a call's tool and text: what the user was asked
    about is what runs."""
    text = f"{call.tool}\0{call.body}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(text).hexdigest()[:16]
