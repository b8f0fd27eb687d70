"""Programs the user's configuration names (an agent CLI, an api_key command),
found on PATH the way the host's own Python is found (`host.lua`
`find_python`): in PATH's absolute entries only. An empty or relative entry
(`PATH=/usr/bin:`, `.`) names the working directory, where a cloned
repository may hold a program of that name; `execvp` and `/bin/sh` would run
it. An absolute entry is the user's own choice, wherever it lies."""

from __future__ import annotations

import os


def find_program(name: str, path: str | None = None) -> str | None:
    """The absolute path of program ``name``: ``name`` itself when it holds a
    ``/`` (a path the user wrote), else the first executable file of that name
    in an absolute entry of ``path`` (default ``$PATH``); None when none is."""
    if "/" in name:
        return name
    if not name:
        return None
    if path is None:
        path = os.environ.get("PATH", os.defpath)
    for entry in path.split(os.pathsep):
        if not os.path.isabs(entry):
            continue
        candidate = os.path.join(entry, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def not_found(name: str) -> str:
    """Why ``find_program`` found nothing, said to the user."""
    return (
        f"{name} is not found on PATH (its empty and relative entries, which name "
        "the working directory, are not searched): give its absolute path"
    )
