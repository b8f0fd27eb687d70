"""Halt the tasks of a Neovim whose host died: the `kill_on_exit` promise kept
without the host.

    python -E -c BOOT <plugin>/rplugin/python3 --halt-owner OWNER --state-dir DIR [--grace S]
    python -E -c BOOT <plugin>/rplugin/python3 --neovim-pid PID --state-dir DIR [--grace S]
    (either, with --keep-mcp-tasks or --keep-editor-tasks)

(BOOT as lua/sidekick_tools/host.lua `command(python, "sidekick_tools.reap")`
builds it.) Lua runs it synchronously in VimLeavePre when the host is dead.
OWNER is the `owner` of the host's init reply ("<nvim pid>:<start token>");
`--neovim-pid` names it by the pid of that Neovim, which must still be running
(Lua passes its own pid in VimLeavePre).
Every queued or running task of OWNER in DIR/tasks.db is halted (but MCP
clients' tasks with --keep-mcp-tasks, Neovim's with --keep-editor-tasks:
each side's `kill_on_exit`, `Config.halts_on_exit`): each live
process group (pid + start token checked) gets SIGTERM, SIGKILL after the
grace (default 0.5 s), and the tasks are recorded cancelled. Prints one JSON
object, {"halted": [...], "cancelled": [...], "unrecorded": [...], "errors":
[...]}, and exits 0; 2 on bad arguments, 1 when the database cannot be used.
Needs neither pynvim nor a running host; done within about a second.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

from .config import started_by_mcp
from .tasks.identity import owner_token, parse_owner, start_token
from .tasks.model import Task
from .tasks.remote_halt import OwnerHalt, halt_owner_now
from .tasks.store import SqliteStore, StoreError

BUSY_TIMEOUT = 0.2  # seconds the database may keep us waiting (Neovim is exiting)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="sidekick_tools.reap", description=__doc__)
    whose = parser.add_mutually_exclusive_group(required=True)
    whose.add_argument("--halt-owner", metavar="OWNER")
    whose.add_argument("--neovim-pid", type=int, metavar="PID")
    parser.add_argument("--state-dir", required=True, metavar="DIR")
    parser.add_argument("--grace", type=float, default=0.5, metavar="SECONDS")
    # Each side's kill_on_exit (Config.halts_on_exit): the tasks MCP clients
    # started (mcp.kill_on_exit = false), or Neovim's (tasks.kill_on_exit = false)
    parser.add_argument("--keep-mcp-tasks", action="store_true")
    parser.add_argument("--keep-editor-tasks", action="store_true")
    args = parser.parse_args(argv)
    if args.neovim_pid is not None:
        if not start_token(args.neovim_pid):
            parser.error(f"--neovim-pid {args.neovim_pid}: no such process")
        args.halt_owner = owner_token(args.neovim_pid)
    if parse_owner(args.halt_owner) is None:
        parser.error(f"--halt-owner {args.halt_owner!r} is not '<pid>:<start token>'")
    path = os.path.join(os.path.expanduser(args.state_dir), "tasks.db")
    if not os.path.exists(path):  # no history: nothing to halt (and nothing created)
        print(json.dumps(OwnerHalt().to_dict()))
        return 0
    try:
        store = SqliteStore(path, busy_timeout=BUSY_TIMEOUT)
    except StoreError as exc:
        sys.stderr.write(f"sidekick_tools.reap: {exc}\n")
        return 1
    try:
        keep = _kept(args.keep_mcp_tasks, args.keep_editor_tasks)
        report = halt_owner_now(store, args.halt_owner, max(0.0, args.grace), keep)
    finally:
        store.close()
    print(json.dumps(report.to_dict()))
    return 0


def _kept(mcp: bool, editor: bool) -> Callable[[Task], bool]:
    def keep(task: Task) -> bool:
        return mcp if started_by_mcp(task) else editor

    return keep


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
