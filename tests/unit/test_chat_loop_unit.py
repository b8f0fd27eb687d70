"""The chat loop's send after its answer: whatever goes wrong is said."""

from __future__ import annotations

import asyncio
from typing import Any

from sidekick_tools.calls.context import CallContext
from sidekick_tools.calls.loop import ChatLoop, Session
from sidekick_tools.calls.marking import UserError
from sidekick_tools.config import Config


class Port:
    def __init__(self) -> None:
        self.told: list[tuple[str, str]] = []

    def notify_user(self, msg: str, level: str) -> None:
        self.told.append((msg, level))


def loop_with(port: Port, failure: BaseException) -> ChatLoop:
    loop = ChatLoop(CallContext(port, None, None, Config.from_dict({})), None, None)

    async def send(_session: Any) -> None:
        raise failure

    loop._send = send  # type: ignore[method-assign]
    return loop


async def test_a_problem_found_after_the_answer_is_said_and_disarms():
    port = Port()
    session = Session(buf=1, cwd="/", armed=True)
    await loop_with(port, UserError("sidekick_tools: no key"))._send_or_say(session)
    assert port.told == [("sidekick_tools: no key", "error")]
    assert not session.armed


async def test_an_internal_error_after_the_answer_is_said_not_lost(caplog):
    port = Port()
    session = Session(buf=1, cwd="/", armed=True)
    await loop_with(port, RuntimeError("boom"))._send_or_say(session)
    assert len(port.told) == 1 and "sending failed" in port.told[0][0]
    assert "boom" not in port.told[0][0]  # the details are in the host log
    assert "boom" in caplog.text
    assert not session.armed


async def test_setup_again_with_other_timeouts_gives_sends_a_client_with_them():
    """setup() again: the next send's HTTP client has the new timeouts and tries;
    the old client is closed once no chat is sending or streaming."""
    ctx = CallContext(Port(), None, None, Config.from_dict({}))
    loop = ChatLoop(ctx, None, None)
    first = loop.client()
    assert loop.client() is first  # the same settings: the same client
    closed: list[bool] = []

    async def aclose() -> None:
        closed.append(True)

    first.aclose = aclose  # type: ignore[method-assign]
    ctx.config = Config.from_dict({"chat": {"timeouts": {"read": 7}, "max_attempts": 2}})
    second = loop.client()
    assert second is not first
    assert (second.timeouts.read, second.max_attempts) == (7, 2)
    await asyncio.gather(*loop._bg)
    assert closed == [True]


class MirrorPort(Port):
    """A chat whose calls all have results and whose last USER: message has
    the user's text: the loop would wait for the user, were it not asked."""

    def __init__(self) -> None:
        super().__init__()
        from sidekick_tools.buffers import BufferMirror

        lines = ["USER: go", "", "ASSISTANT: ok", "", "USER: and then?"]
        self.m = BufferMirror(1, "chat.sidekick.md", lines, 1)

    async def mirror(self, _buf: int) -> Any:
        return self.m


def queued_loop() -> tuple[ChatLoop, Session, list[Session]]:
    loop = ChatLoop(CallContext(MirrorPort(), None, None, Config.from_dict({})), None, None)
    session = loop.sessions.setdefault(1, Session(buf=1, cwd="/", send_queued=True))
    sent: list[Session] = []

    async def send(s: Session) -> None:
        sent.append(s)

    loop._send = send  # type: ignore[method-assign]
    return loop, session, sent


async def test_a_send_waiting_for_running_calls_goes_even_though_the_user_typed():
    loop, session, sent = queued_loop()
    await loop._continue(session)
    assert sent == [session] and not session.send_queued
    await loop._continue(session)  # a later result: the send went already
    assert sent == [session]


async def test_stop_cancels_a_send_waiting_for_running_calls():
    loop, session, sent = queued_loop()
    answer = loop.stop(1)
    assert not session.send_queued
    # the user is told their send is off, not only that the loop stops
    assert "send cancelled" in answer["message"]
    assert "send cancelled" not in loop.stop(1)["message"]  # nothing waited any more
    await loop._continue(session)
    assert sent == []
