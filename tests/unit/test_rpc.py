"""The host's RPC surface is declared once (rpc.py) and is what Lua calls."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sidekick_tools import host, rpc  # noqa: F401  (host declares its methods on import)

LUA = Path(__file__).resolve().parents[2] / "lua"

# host.request("x", ...), pcall(host.request, "x"), act(buf, "x", ...), vim.rpcnotify(job, "x")
CALL = re.compile(
    r'(?:host\.request\(|host\.request,\s*|act\(buf,\s*|rpcrequest,\s*state\.chan,\s*)"(\w+)"'
)
NOTIFY = re.compile(r'(?:host\.notify\(|vim\.rpcnotify\(\w+,\s*)"(\w+)"')
LOOP = re.compile(r"for _, method in ipairs\(\{([^}]*)\}\)")


def lua_sources() -> str:
    return "\n".join(p.read_text() for p in LUA.rglob("*.lua"))


def test_every_request_lua_makes_is_declared_as_one():
    text = lua_sources()
    requested = set(CALL.findall(text))
    for group in LOOP.findall(text):
        requested |= set(re.findall(r'"(\w+)"', group))
    assert {"run_tool", "send", "halt", "init", "shutdown"} <= requested  # the regexes see them
    for name in sorted(requested):
        assert rpc.lookup(name, rpc.REQUEST) is not None, f"Lua requests {name}; not declared"


def test_every_notification_lua_sends_is_declared_as_one():
    sent = set(NOTIFY.findall(lua_sources()))
    assert {"init", "chat_opened"} <= sent
    for name in sorted(sent):
        assert rpc.lookup(name, rpc.NOTIFICATION) is not None, f"Lua notifies {name}"


def test_only_init_runs_before_init_and_requests_are_not_notifications():
    assert [m.name for m in rpc.METHODS.values() if m.before_init] == ["init"]
    assert rpc.lookup("run_tool", rpc.NOTIFICATION) is None  # running needs an answer
    assert rpc.lookup("chat_opened", rpc.REQUEST) is None  # nobody waits on it
    assert rpc.lookup("no_such_method", rpc.REQUEST) is None


def test_a_method_is_declared_once_and_named_for_the_wire():
    with pytest.raises(ValueError, match="declared twice"):

        @rpc.request
        def rpc_ping(self):  # already the host's
            return "pong"

    with pytest.raises(ValueError, match="starts with rpc_"):

        @rpc.request
        def ping(self):
            return "pong"


def test_the_hosts_last_work_finishes_though_pynvim_stops_the_loop_meanwhile():
    """At the host's exit `block_on` runs the loop itself; pynvim may stop it
    again (SIGTERM, then the end of its stream): the work still completes,
    and an error of the work itself still comes out."""
    import asyncio

    from sidekick_tools.nvim_port import NvimPort

    loop = asyncio.new_event_loop()
    try:
        port = NvimPort(type("Nvim", (), {"loop": loop})())

        async def work() -> int:
            for _ in range(3):
                loop.call_soon(loop.stop)  # stopped three times before it is done
                await asyncio.sleep(0.01)
            return 42

        assert port.block_on(work()) == 42

        async def broken() -> None:
            raise RuntimeError("the work's own")

        with pytest.raises(RuntimeError, match="the work's own"):
            port.block_on(broken())
    finally:
        loop.close()
