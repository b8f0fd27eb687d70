"""Where a send goes: which provider URLs lead to this machine, and when a
chat's front matter is asked about (calls/outbound.py)."""

from __future__ import annotations

import pytest
from sidekick_tools.calls import outbound
from sidekick_tools.config import Config


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:11434/v1",
        "http://127.0.0.2:8/",
        "http://[::1]:8080/v1",
        "http://user:pw@127.0.0.1/",
        "http://127.1:11434/v1",  # the forms the HTTP client connects to as well
        "http://0:11434/v1",
        "http://2130706433:11434/v1",
        "http://[::ffff:127.0.0.1]:11434/v1",
        "http://0.0.0.0:1",
    ],
)
async def test_urls_that_lead_to_this_machine(url):
    assert await outbound.on_this_machine(url) is True


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/",
        "http://198.51.100.7:8000/v1",
        "http://[2001:db8::1]/",
        "http://example.invalid/v1",  # not resolved: no name of this machine's
        "localhost:1234",  # no URL
        "http://[::1/",  # no URL either
        "",
    ],
)
async def test_urls_that_lead_elsewhere(url):
    assert await outbound.on_this_machine(url) is False


def config(**providers) -> Config:
    return Config.from_dict({"chat": {"model": "main/m", "providers": providers}})


LOCAL = {"kind": "openai", "base_url": "http://127.0.0.1:11434/v1"}
REMOTE = {"kind": "openai", "base_url": "http://198.51.100.7/v1"}


async def test_a_front_matter_naming_a_server_on_this_machine_is_asked_about():
    cfg = config(main=LOCAL, other=LOCAL, far=REMOTE)
    question = await outbound.local_question({"model": "other/x", "provider": "other"}, [], cfg)
    assert question is not None and "other/x (http://127.0.0.1:11434/v1)" in question
    assert "chat.model (main/m)" in question
    # chat.model's own provider, one the user chose, any (true), one elsewhere: not asked
    for answer, trusted in (
        ({"model": "main/y", "provider": "main"}, []),
        ({"model": "other/x", "provider": "other"}, ["other"]),
        ({"model": "other/x", "provider": "other"}, True),
        ({"model": "far/x", "provider": "far"}, []),
    ):
        assert await outbound.local_question(answer, trusted, cfg) is None


def test_a_front_matter_below_blank_lines_is_said_not_passed_over():
    """Blank lines above it keep a front matter from being read: the chat is not
    sent to chat.model in silence (a local model's chat going to a cloud one)."""
    from types import SimpleNamespace

    from sidekick_tools.calls.chain import UserError

    cfg = config(main=REMOTE, local=LOCAL)
    for lines in (
        ["", "---", "model: local/x", "---", "USER: hi"],
        ["  ", "---", "---", "USER: hi"],
    ):
        with pytest.raises(UserError, match=f"starts on line {lines.index('---') + 1}, not"):
            outbound.model_of(SimpleNamespace(lines=lines), cfg)
    # read where it is; or no front matter at all, or a --- that is text
    for lines, spec in (
        (["---", "model: local/x", "---", "", "USER: hi"], "local/x"),
        (["", "USER: hi"], "main/m"),
        (["", "---", "USER: a rule, no front matter"], "main/m"),
    ):
        assert outbound.model_of(SimpleNamespace(lines=lines), cfg)["model"] == spec


async def test_this_machines_own_address_leads_to_it():
    """A server bound to 0.0.0.0 answers on the machine's LAN address too."""
    import socket

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("198.51.100.1", 9))  # a route is chosen; nothing is sent
            own = probe.getsockname()[0]
    except OSError:
        pytest.skip("no route to learn this machine's own address from")
    assert await outbound.on_this_machine(f"http://{own}:11434/v1") is True


async def test_a_name_not_resolved_in_time_is_asked_about(monkeypatch):
    import asyncio

    async def slow(*_args, **_kwargs):
        await asyncio.sleep(10)

    monkeypatch.setattr(outbound, "RESOLVE_SECONDS", 0.05)
    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", slow)
    assert await outbound.on_this_machine("http://slow.example:11434/v1") is True
