"""What a send does before its reply streams: name the chat's model, build the
request from the chat as it is, get the provider's key, and open the reply's
region at the end of the chat. Each problem is a UserError the user reads.

The chat loop (loop.py) decides when to send; this module only gets one ready.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any
from urllib.parse import urlsplit

from .. import tools
from ..chat.reply import MARKER
from ..config import Config
from .chain import UserError


def chat_settings(config: Config) -> dict[str, Any]:
    """The `chat` table of the setup."""
    return dict(config.chat or {})


def model_of(mirror: Any, config: Config) -> dict[str, Any]:
    """The chat's provider and model, from its front matter (cheap: row 0 on)."""
    from ..chat.conversation import misplaced_front_matter, read_front_matter
    from ..llm import ConfigError
    from ..llm.settings import ChatConfig, request_options

    front = read_front_matter(mirror.lines)
    try:
        settings = ChatConfig.from_dict(chat_settings(config))
        row = misplaced_front_matter(mirror.lines) if front is None else None
        if row is not None:
            # its model (a local one, say) would be passed over in silence
            raise UserError(
                f"sidekick_tools: this chat's front matter starts on line {row + 1}, not on "
                f"its first line, so it is not read and the chat would go to chat.model "
                f"({settings.model}): remove the blank lines above it, then send"
            )
        spec, _ = request_options(settings, front.values if front else None)
        provider, _model = settings.provider_for(spec)
    except ConfigError as exc:
        raise UserError(f"sidekick_tools: {exc.message}") from None
    return {"model": spec, "provider": provider.name}


async def build(marks: Any, buf: int, config: Config) -> Any:
    """The request the chat in `buf` makes now (a ChatRequest)."""
    from ..llm import ChatNotReady, ConfigError, build_request

    mirror = await marks.mirror(buf)
    # A long chat's first request takes a while to build (later ones reuse
    # it): off the loop, from a copy, so the host keeps answering.
    lines, chat, cfg = list(mirror.lines), mirror.chat(), chat_settings(config)
    specs = tools.specs(config)  # descriptions carry the configured numbers
    loop = asyncio.get_running_loop()
    try:
        return await loop.run_in_executor(None, lambda: build_request(lines, cfg, specs, chat=chat))
    except (ChatNotReady, ConfigError) as exc:
        raise UserError(f"sidekick_tools: {exc.message}") from None


# How long a send waits to learn where a provider's host name leads.
RESOLVE_SECONDS = 1.0


async def on_this_machine(url: str) -> bool:
    """Does `url` lead to this machine: is its host, or what its name resolves
    to, a loopback or unspecified address (`127.1`, `[::ffff:127.0.0.1]`, a
    name /etc/hosts gives 127.0.1.1) or one of the machine's own (its LAN
    address)? Any user of the machine may listen there. A name that does not
    resolve within RESOLVE_SECONDS counts as one: the question is asked."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return False
    if not host:
        return False
    loop = asyncio.get_running_loop()
    try:
        found = await asyncio.wait_for(
            loop.getaddrinfo(host, None, type=socket.SOCK_STREAM), RESOLVE_SECONDS
        )
    except asyncio.TimeoutError:
        return True  # not known in time: asked, rather than sent where it may lead
    except (OSError, UnicodeError):
        return False  # no address: the send fails to connect anyway
    for *_, address in found:
        try:
            ip = ipaddress.ip_address(str(address[0]).split("%", 1)[0])
        except ValueError:
            continue
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if ip.is_loopback or ip.is_unspecified or _own_address(ip):
            return True
    return False


def _own_address(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Is `ip` one of this machine's own (a server of any user bound to 0.0.0.0
    answers there too)? Only the machine's own addresses can be bound."""
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((str(ip), 0))
    except OSError:
        return False
    return True


async def local_question(answer: dict[str, Any], trusted: Any, config: Config) -> str | None:
    """The question to ask before a chat goes where `answer` (`model_of`) says,
    or None: its front matter names a provider on this machine that is not
    chat.model's, nor one the user chose for this chat (`trusted`: their names;
    True: any). A chat file from someone else, and another user of the machine
    who took the port while the user's own server is not running, would get
    the conversation (and answer as the model)."""
    from ..llm import ConfigError
    from ..llm.settings import ChatConfig

    if trusted is True:
        return None
    chosen = {str(name) for name in (trusted or ())} if isinstance(trusted, (list, dict)) else set()
    settings = ChatConfig.from_dict(chat_settings(config))
    try:
        own = settings.provider_for(settings.model)[0].name
    except ConfigError:
        own = None
    name = answer["provider"]
    if name == own or name in chosen:
        return None
    provider, _model = settings.provider_for(answer["model"])
    if not await on_this_machine(provider.base_url):
        return None
    return (
        f"This chat's front matter sends it to {answer['model']} ({provider.base_url}), a "
        f"server on this machine, not where chat.model ({settings.model}) sends it. Whatever "
        "program listens there gets the conversation and answers as the model. Send it there?"
    )


async def api_key(port: Any, provider: Any) -> str | None:
    """The provider's key: from a Lua function in the user's config, the
    environment or a command; None where none is configured."""
    from ..llm import LLMError, resolve_key

    spec = provider.api_key
    if isinstance(spec, str) and spec.startswith("lua:"):
        # a Lua function in the user's config: Lua calls it, the key comes back
        key = await port.lua_api_key(provider.name)
        if key is False:
            raise UserError(
                f"sidekick_tools: chat.providers.{provider.name}.api_key (a function) raised "
                "an error; call it yourself to see why"
            )
        if not key:
            raise UserError(
                f"sidekick_tools: chat.providers.{provider.name}.api_key (a function) "
                "gave no key: it must return the key as a non-empty string"
            )
        return key
    try:
        return await resolve_key(spec)
    except LLMError as exc:
        raise UserError(f"sidekick_tools: {exc.message}") from None


async def open_reply(port: Any, marks: Any, buf: int, mark: int) -> int:
    """Put the reply's ASSISTANT: line at the end of the chat (an empty last
    USER: message becomes it), with an empty USER: message after it for the
    user to type into while it streams; its region gets extmark `mark`."""
    for _ in range(50):
        mirror = await marks.mirror(buf)
        lines = mirror.lines
        n = len(lines)
        last = mirror.chat().messages[-1] if mirror.chat().messages else None
        if (
            last is not None
            and last.role == "USER"
            and not "".join(lines[last.start_row : last.end_row + 1])
            .strip(" \t")
            .removeprefix("USER:")
            .strip()
        ):
            at = last.start_row  # an empty USER: message: the reply takes its place
            edit = (at, n, [MARKER, "", "USER: "])
            row = at
        else:
            pad = [""] if n and lines[-1].strip() else []
            edit = (n, n, [*pad, MARKER, "", "USER: "])
            row = n + len(pad)
        if await port.apply(buf, mirror.tick, [edit]):
            await port.reply_open(buf, mark, row)
            return mark
        await asyncio.sleep(0.005)
    raise UserError("sidekick_tools: the chat kept changing; :SidekickSend again")
