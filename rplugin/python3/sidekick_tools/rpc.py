"""The host's RPC surface, declared once: each method the editor may call,
whether it is a request (Lua waits for the answer), a notification (fire and
forget) or both, and whether it may come before `init`.

    class Host:
        @rpc.request
        def rpc_ping(self): ...

        @rpc.notification
        def rpc_chat_opened(self, buf): ...

The wire name is the function's name without ``rpc_``. `Host.on_request` and
`Host.on_notification` dispatch through `METHODS`; a name that is not declared
for the way it came is refused (a request) or ignored (a notification).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

REQUEST = "request"
NOTIFICATION = "notification"
PREFIX = "rpc_"


@dataclass(frozen=True)
class Method:
    name: str  # on the wire
    fn: Callable[..., Any]  # unbound: called with the host first
    kinds: frozenset[str]  # REQUEST and/or NOTIFICATION
    before_init: bool = False  # may run before the host has its configuration


METHODS: dict[str, Method] = {}


def _declare(kinds: tuple[str, ...], before_init: bool) -> Callable[[Any], Any]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if not fn.__name__.startswith(PREFIX):
            raise ValueError(f"an RPC method's name starts with {PREFIX}: {fn.__name__}")
        name = fn.__name__[len(PREFIX) :]
        if name in METHODS:
            raise ValueError(f"RPC method {name} declared twice")
        METHODS[name] = Method(name, fn, frozenset(kinds), before_init)
        return fn

    return register


def request(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A method Lua calls with rpcrequest and waits for."""
    return _declare((REQUEST,), False)(fn)


def notification(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A method Lua sends with rpcnotify: nobody waits for it."""
    return _declare((NOTIFICATION,), False)(fn)


def init(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The one method that comes first: notified at start, requested by setup()."""
    return _declare((NOTIFICATION, REQUEST), True)(fn)


def lookup(name: str, kind: str) -> Method | None:
    """The method `name` when it is declared for `kind`."""
    method = METHODS.get(name)
    return method if method is not None and kind in method.kinds else None
