"""API keys: resolve ``"env:NAME"``, ``"cmd:COMMAND"`` or a literal.

A Lua function key is called on the Lua side and arrives here as a literal. A key
lives only in memory, for the request that needs it: it is never logged, never
written to disk, never part of an error message (the errors below name where the
key was to come from, never what came out).

``cmd:`` runs the command without a shell (split like a shell would, no pipes,
no expansion: predictable, and nothing in it is interpreted twice); write
``cmd:sh -c '...'`` when a pipeline is needed. A bare program name is looked up
in PATH's absolute entries only (`programs.find_program`): never in the working
directory. It gets no input, must finish within
10 s, and its first non-empty line of output, trimmed, is the key (``pass show``
puts the secret on the first line and notes after it).
"""

from __future__ import annotations

import asyncio
import os
import shlex

from ..programs import find_program, not_found
from ..secrets_mask import mask
from .errors import KeyUnavailable

COMMAND_TIMEOUT = 10.0


async def resolve_key(spec: str | None, *, timeout: float = COMMAND_TIMEOUT) -> str | None:
    """The key ``spec`` names; ``None`` when there is none (local servers).

    A key is printable ASCII: one that is not (a typographic dash pasted from a
    document, say) is refused here, never sent, so no error further on quotes it."""
    key = await _resolve(spec, timeout)
    if key is not None and not (key.isascii() and key.isprintable()):
        where = str(spec).split(":", 1)[0] if ":" in str(spec) else "the configuration"
        raise KeyUnavailable(
            f"The API key from {where} has characters no key has (not printable ASCII: "
            "a typographic dash or a space pasted with it?): check it"
        )
    return key


async def _resolve(spec: str | None, timeout: float) -> str | None:
    if spec is None or not str(spec).strip():
        return None
    spec = str(spec)
    if spec.startswith("env:"):
        name = spec[4:].strip()
        value = os.environ.get(name, "").strip()
        if not value:
            raise KeyUnavailable(
                f"No API key: the environment variable {name} is not set. Set it where Neovim "
                f"starts (export {name}=...), or change this provider's api_key"
            )
        return value
    if spec.startswith("cmd:"):
        return await _from_command(spec[4:], timeout)
    return spec.strip()


async def _from_command(command: str, timeout: float) -> str:
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise KeyUnavailable(f"The api_key command cannot be read: {exc}") from None
    if not argv:
        raise KeyUnavailable('The api_key "cmd:" names no command: write cmd:pass show NAME')
    shown = mask(command.strip())
    program = find_program(argv[0])
    if program is None:
        raise KeyUnavailable(f"The api_key command `{shown}` cannot run: {not_found(argv[0])}")
    try:
        proc = await asyncio.create_subprocess_exec(
            program,
            *argv[1:],
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
    except OSError as exc:
        raise KeyUnavailable(
            f"The api_key command `{shown}` could not start: {exc.strerror or exc}"
        ) from None
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise KeyUnavailable(
            f"The api_key command `{shown}` did not finish within {timeout:g} s "
            f"(does it wait for a passphrase? unlock the store first)"
        ) from None
    except asyncio.CancelledError:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    if proc.returncode != 0:
        raise KeyUnavailable(
            f"The api_key command `{shown}` failed (exit {proc.returncode}): "
            f"run it in a terminal to see why"
        )
    for line in out.decode("utf-8", "replace").splitlines():
        if line.strip():
            return line.strip()
    raise KeyUnavailable(f"The api_key command `{shown}` printed nothing")
