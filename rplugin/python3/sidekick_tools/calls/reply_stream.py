"""One reply streaming into its chat (DESIGN §10): the provider's deltas are
rendered into the reply's region, coalesced into at most one buffer edit per
`FRAME` seconds and sent without waiting; at the end the region is given the
whole reply (Lua keeps what the user changed in it meanwhile), with a note of
the plugin's under it for an error, a stop or a cut reply, and the reply's
token usage goes to Lua as virtual text.

The chat loop (loop.py) decides when a reply is asked for and what follows it;
this module only streams one in.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from ..chat.blocks import STOP_MAX_TOKENS, Usage
from ..chat.render import fence_for
from ..chat.reply_render import Edit, ReplyRenderer
from ..secrets_mask import mask

log = logging.getLogger(__name__)

FRAME = 0.016  # seconds: at most one buffer edit per frame while a reply streams
# A frame that cost t seconds (a reply of a million lines, one line of megabytes
# masked again) is followed by at least PACE * t seconds of the host's other
# work: the editor's requests, the stream itself. A hostile reply made frames of
# seconds back to back, and the editor waited on the host for minutes.
PACE = 4
NOTE_FENCE = "sidekick"  # ```sidekick ... blocks: the plugin's notes, never sent


@dataclass
class StreamEnd:
    """How a reply ended."""

    call_ids: list[str] = field(default_factory=list)  # the calls it made
    error: str | None = None  # what went wrong, masked; None: it ended well
    stopped: bool = False  # :SidekickStop ended it


class ReplyStream:
    """Streams one reply into the region of `session` (buf, mark)."""

    def __init__(self, port: Any, session: Any) -> None:
        self.port = port
        self.session = session

    async def run(self, client: Any, request: Any, key: str | None) -> StreamEnd:
        from ..llm import LLMError

        mirror = self.port.mirrors.get(self.session.buf)
        taken = {c.call_id for c in mirror.chat().calls if c.call_id} if mirror else set()
        secret = (key,) if key else ()
        renderer = ReplyRenderer(taken, secret)
        frames = FrameWriter(self.port, self.session, renderer)
        end = StreamEnd()
        try:
            try:
                async for delta in client.stream(request, key, self._retry_notice(secret)):
                    renderer.feed(delta)
                    frames.soon()
            except asyncio.CancelledError:
                end.stopped = True
            except LLMError as exc:
                end.error = exc.message
            except Exception as exc:  # a bug must not lose the reply
                name = type(exc).__name__
                log.error("chat %d: the reply stream failed (%s)", self.session.buf, name)
                end.error = f"internal error ({name}; details in the host log)"
            renderer.finish(stopped=end.stopped or end.error is not None)
            if end.error is not None:
                end.error = mask(end.error, secret)
            await frames.final(_note_for(end, renderer))
            self._usage(renderer.reply.usage)
            end.call_ids = [c.call_id for c in renderer.reply.tool_calls]
        except Exception:  # never leave the chat "streaming" for good
            log.exception("chat %d: the end of a reply failed", self.session.buf)
            end.error = end.error or (
                "internal error at the end of the reply (details in the host log)"
            )
        return end

    def _usage(self, usage: Usage) -> None:
        """Tokens in and out, cache reads and writes: virtual text on the ASSISTANT: line."""
        if self.session.mark is None:
            return
        parts = []
        if usage.input_tokens is not None:
            parts.append(f"↑{usage.input_tokens}")
        if usage.output_tokens is not None:
            parts.append(f"↓{usage.output_tokens}")
        if usage.cache_read_tokens:
            parts.append(f"cache {usage.cache_read_tokens}")
        if usage.cache_write_tokens:
            parts.append(f"cache+ {usage.cache_write_tokens}")
        if parts:
            self.port.emit(
                {
                    "type": "usage",
                    "buf": self.session.buf,
                    "mark": self.session.mark,
                    "text": " ".join(parts),
                }
            )

    def _retry_notice(self, secret: tuple[str, ...]) -> Any:
        def on_retry(notice: Any) -> None:
            self.port.notify_user(
                f"sidekick_tools: {mask(notice.reason, secret)}; trying again in "
                f"{notice.delay:.1f}s "
                f"({notice.attempt}/{notice.max_attempts})",
                "warn",
            )

        return on_retry


def _note_for(end: StreamEnd, renderer: ReplyRenderer) -> list[str]:
    if end.error is not None:
        return note("error", end.error)
    if end.stopped:
        return note("stopped", "Stopped by the user; what arrived is above.")
    stop = renderer.reply.stop
    if stop is not None and stop.reason == STOP_MAX_TOKENS:
        return note(
            "max_tokens",
            "The reply reached its token limit (max_tokens: chat.max_tokens, or the "
            "chat's front matter) and was cut there.",
        )
    return []


def note(kind: str, text: str) -> list[str]:
    """A note of the plugin's under a reply: shown in the chat, never sent."""
    fence = fence_for(text)
    return ["", f"{fence}{NOTE_FENCE} {kind}", *text.split("\n"), fence]


class FrameWriter:
    """The reply's edits, coalesced to one per frame, sent without waiting."""

    def __init__(self, port: Any, session: Any, renderer: ReplyRenderer) -> None:
        self.port = port
        self.session = session
        self.renderer = renderer
        self._handle: asyncio.TimerHandle | None = None
        self._last = 0.0
        self._cost = 0.0  # what the last frame took
        # The region starts as the ASSISTANT: line the send wrote: the renderer's
        # first edit (that line itself) is already in the buffer.
        renderer.take()
        self._shown: list[str] = renderer.lines  # the region as the buffer has it

    def soon(self) -> None:
        if self._handle is not None:
            return
        loop = asyncio.get_event_loop()
        gap = max(FRAME, (PACE + 1) * self._cost)
        wait = max(0.0, self._last + gap - time.monotonic())
        self._handle = loop.call_later(wait, self.flush)

    def flush(self) -> None:
        self._handle = None
        self._last = time.monotonic()
        edit = self.renderer.take()
        if edit is not None:
            self._send(edit)
        self._cost = time.monotonic() - self._last

    def _send(self, edit: Edit) -> None:
        expect = self._shown[edit.start_row]
        self.port.reply_edit(
            self.session.buf,
            self.session.mark,
            [edit.start_row, edit.start_col, edit.end_row, edit.end_col, list(edit.lines)],
            expect,
            len(self._shown),
        )
        self._shown = self.renderer.lines

    async def final(self, note_lines: list[str]) -> None:
        """The last edit, then the whole reply with the note under it (error,
        stop): Lua writes what its region lacks, keeping the user's changes."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        edit = self.renderer.take()
        if edit is not None:
            self._send(edit)
        lines = self.renderer.lines
        if note_lines:
            lines = [*lines, *note_lines]
        ok = await self.port.reply_close(self.session.buf, self.session.mark, lines)
        if not ok:
            log.warning("chat %d: the reply's region is gone; it was not written", self.session.buf)
