"""Whether a tool call runs without asking: the one place that decides.

`decide(tool_name, params, ctx, policy_answer)` returns ``"approve"``,
``"deny"`` or ``"ask"``:

1. ``policy_answer`` is what the user's Lua ``auto_accept.policy`` function
   returned for this call (the host asks Lua first, when
   ``config.auto_accept.has_policy``). ``"approve"`` or ``"deny"`` wins outright,
   whatever the tool and parameters. Anything else (nil, other strings) means
   "no opinion" and the defaults below apply.
2. Unknown tools, and parameters that fail the tool's schema: ``"ask"``.
3. ``run_terminal_command``: ``"approve"`` iff the parsed command matches a safe
   form (``tools/command_policy.py``: one plain program call, only the options
   its form allows, every path and the ``cwd`` parameter inside the working
   directory; forms from ``config.auto_accept.safe_commands`` and
   ``command_forms``). ``config.auto_accept.tools`` plays no part: listing the
   tool there does not approve arbitrary commands.
4. ``use_agent``: ``"approve"`` iff ``config.agents[params.agent].auto_accept``.
5. Every other tool: ``"approve"`` iff its name is in ``config.auto_accept.tools``
   AND its own ``auto_accept(params, ctx)`` predicate holds. For read_files and
   list_directory the predicate is "every path is really inside cwd"; for
   write_file and replace_in_file it is the same, but they are not in the
   default list, so writes are never auto-accepted unless the user adds them.
   A predicate that raises counts as false.

Steps 3 and 5 approve nothing where the working directory itself is the root
of the file system or the home folder (or above it): "inside" it is then every
file of the user's (a Neovim started in ``~``, a GUI one in ``/``).

Otherwise ``"ask"``: the call waits for the user (:SidekickRunTool).

The host calls `judge`: the same answer, found away from its event loop where
finding it may read the disk at length (a command's repository: every file of
its git directory and an index of up to 256 MiB), so the editor's requests are
answered meanwhile.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from . import _fs
from .base import ToolContext

APPROVE = "approve"
DENY = "deny"
ASK = "ask"

# tools approved only when where they act lies inside the working directory
CONFINED = frozenset(
    ("run_terminal_command", "read_files", "list_directory", "write_file", "replace_in_file")
)


def decide(
    tool_name: str,
    params: Any,
    ctx: ToolContext,
    policy_answer: str | None = None,
) -> str:
    return decide_why(tool_name, params, ctx, policy_answer)[0]


def decide_why(
    tool_name: str, params: Any, ctx: ToolContext, policy_answer: str | None = None
) -> tuple[str, str | None]:
    """`decide`, and for a command it asks about, why: the command policy's
    reason ("touch is not a safe command"), which a consent question shows."""
    if isinstance(policy_answer, str) and policy_answer.strip().lower() in (APPROVE, DENY):
        return policy_answer.strip().lower(), None

    from . import REGISTRY, check_call  # late: the registry imports every tool

    tool = REGISTRY.get(tool_name)
    if tool is None or not isinstance(params, dict) or check_call(tool_name, params):
        return ASK, None

    config = ctx.config
    if tool_name in CONFINED:
        broad = _fs.too_broad(ctx.cwd)
        if broad is not None:
            return ASK, (f"the working directory is {broad}: nothing runs there without asking")
    if tool_name == "use_agent":
        name = params.get("agent")
        agent = config.agents.get(name) if isinstance(name, str) else None
        return APPROVE if agent is not None and agent.auto_accept else ASK, None
    if tool_name == "run_terminal_command":
        from .run_terminal_command import auto_verdict  # its auto_accept, with the reason

        try:
            verdict = auto_verdict(params, ctx)
        except Exception:
            return ASK, None
        return (APPROVE, None) if verdict.approved else (ASK, verdict.reason or None)
    if tool_name not in config.auto_accept.tools:
        return ASK, None
    try:
        accepted = bool(tool.auto_accept(params, ctx))
    except Exception:
        accepted = False
    return APPROVE if accepted else ASK, None


async def judge(
    tool_name: str, params: Any, ctx: ToolContext, policy_answer: str | None = None
) -> str:
    """`decide`, in a worker thread for a terminal command (the module docstring says why)."""
    return (await judge_why(tool_name, params, ctx, policy_answer))[0]


async def judge_why(
    tool_name: str, params: Any, ctx: ToolContext, policy_answer: str | None = None
) -> tuple[str, str | None]:
    """`decide_why`, in a worker thread for a terminal command."""
    if tool_name == "run_terminal_command":
        return await asyncio.to_thread(decide_why, tool_name, params, ctx, policy_answer)
    return decide_why(tool_name, params, ctx, policy_answer)


def _outside(params: Any, cwd: str) -> list[tuple[str, str]]:
    """Each of a call's ``path``, ``paths`` and ``cwd`` that leads outside
    ``cwd`` (through ``..``, an absolute path or a symlink in the project),
    with where it really leads."""
    if not isinstance(params, dict):
        return []
    paths = params.get("paths")
    named = [params.get("path"), params.get("cwd"), *(paths if isinstance(paths, list) else [])]
    out = []
    for path in named:
        if isinstance(path, str) and path and not _fs.is_inside(path, cwd):
            try:
                out.append((path, _fs.real(path, cwd)))
            except (ValueError, OSError):  # a PathError is a ValueError
                out.append((path, path))
    return out


def outside_note(params: Any, cwd: str, tool_name: str = "") -> str:
    """For a consent question: where a call's ``path``, ``paths`` or ``cwd``
    really leads when that is outside ``cwd``, or where a write lands when a
    link leads it into a folder whose files tools run (`hidden_code`), else ""."""
    out = [real for _, real in _outside(params, cwd)]
    note = f" [outside the working directory: {', '.join(out)}]" if out else ""
    code = [real for _, real in hidden_code(tool_name, params, cwd)]
    return note + (f" [{CODE_WORDS}: {', '.join(code)}]" if code else "")


CODE_WORDS = "in a folder whose files git or Mercurial run"


def hidden_code(tool_name: str, params: Any, cwd: str) -> list[tuple[str, str]]:
    """A write's ``path`` that reads as no place whose files tools run
    (`_fs.runs_code`: `.git`, a hooks folder, …) but lands in one through a
    link in the project (`settings.cfg` -> `.git/config`: the next `git
    status` runs what the write put there), with where it lands."""
    from . import REGISTRY  # late: the registry imports every tool

    if not getattr(REGISTRY.get(tool_name), "writes", False) or not isinstance(params, dict):
        return []
    path = params.get("path")
    if not isinstance(path, str) or not path:
        return []
    try:
        shown, target = _fs.resolve(path, cwd), _fs.real(path, cwd)
    except (ValueError, OSError):
        return []
    # (each look may ask git: written so, it is said already, and not looked at again)
    if target == shown or _fs.runs_code(shown) or not _fs.runs_code(target):
        return []
    return [(path, target)]


def hidden_outside(params: Any, cwd: str) -> list[tuple[str, str]]:
    """The paths of a call that read as inside ``cwd`` (``sub/../docs/x`` and
    ``/project/docs/x`` too: the path normalised, symlinks left alone) but lead
    outside it through a symlink the project holds, with where they really
    lead: the call's text does not show it, so running it by hand is no
    consent to it."""
    root = os.path.abspath(cwd)

    def reads_inside(path: str) -> bool:
        try:
            shown = _fs.resolve(path, cwd)
        except ValueError:  # a PathError: no file at all
            return False
        return _fs.under(shown, root)

    return [(path, real) for path, real in _outside(params, cwd) if reads_inside(path)]
