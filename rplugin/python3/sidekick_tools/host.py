"""RPC methods of the host: translate arguments, dispatch, translate errors.

Each request runs in a pynvim greenlet; work that takes time is a coroutine on
the loop, awaited with `port.block_on` only where Lua needs the answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from typing import Any, Callable

from . import __version__, rpc
from .calls import CallRunner, UserError
from .calls.follow import task_view
from .config import Config
from .halting import halt_answer
from .nvim_port import NvimPort
from .secrets_mask import mask_stream
from .statedir import log_to_file, open_state_dir
from .tasks.identity import owner_token
from .tasks.manager import TaskManager
from .tasks.model import NAMES
from .tasks.start import FALLBACK, start_manager
from .tasks.store import StoreError
from .tools import command_table

log = logging.getLogger(__name__)


class Host:
    def __init__(self, nvim: Any) -> None:
        self.port = NvimPort(nvim)
        self.config: Config | None = None
        self.tasks: TaskManager | None = None
        self.calls: CallRunner | None = None
        self.owner = ""
        self.store_kind = ""
        self._shut_down = False
        self._initialising: Any = None  # future while init runs
        self._masking: set[asyncio.Future[None]] = set()  # output views' lines

    # -- dispatch (the methods are declared in rpc.py's table) ----------------------
    def on_request(self, name: str, args: list[Any]) -> Any:
        method = rpc.lookup(name, rpc.REQUEST)
        if method is None:
            raise _error_response(f"sidekick_tools: unknown method {name}")
        self._ready(method)
        try:
            return method.fn(self, *args)
        except (UserError, StoreError) as exc:  # StoreError: the database is locked
            raise _error_response(str(exc)) from None
        except TypeError as exc:
            log.exception("bad arguments for %s", name)
            raise _error_response(f"sidekick_tools: bad arguments for {name}: {exc}") from None

    def on_notification(self, name: str, args: list[Any]) -> None:
        if self.port.on_notification(name, args):
            return
        method = rpc.lookup(name, rpc.NOTIFICATION)
        if method is None:
            log.debug("ignored notification %s", name)
            return
        try:
            self._ready(method)
            method.fn(self, *args)
        except Exception as exc:  # nobody waits for an answer: tell the user
            log.exception("notification %s failed", name)
            self.port.notify_user(f"sidekick_tools: {name} failed: {_message(exc)}", "error")

    def _ready(self, method: rpc.Method) -> None:
        """Every method but init waits for init (Lua sends it as a notification)."""
        if method.before_init:
            return
        if self._initialising is not None:
            self.port.block_on(self._initialising)
        if self.calls is None:
            raise _error_response("sidekick_tools: host not initialised (init first)")

    # -- methods ---------------------------------------------------------------------
    @rpc.init
    def rpc_init(self, raw_config: dict[str, Any], info: dict[str, Any] | None = None) -> Any:
        config = Config.from_dict(raw_config)
        if self.tasks is not None and self.config is not None:
            self._reconfigure(config)
            return self._info()
        self._initialising = self.port.loop.create_future()
        try:
            return self._init(config, info)
        finally:
            self._initialising.set_result(None)
            self._initialising = None

    def _init(self, config: Config, info: dict[str, Any] | None) -> Any:
        self.config = config
        state = open_state_dir(config.state_dir, config.state_fallback)
        log_to_file(os.path.join(state.path, "host.log"))
        nvim_pid = int((info or {}).get("nvim_pid") or os.getppid())
        self.owner = owner_token(nvim_pid)
        self.tasks, self.store_kind = start_manager(
            config.tasks, state, self.owner, self._store_failed
        )
        self.port.block_on(self.tasks.recover())
        self.calls = CallRunner(self.port, self.tasks, config)
        self._report_config_problems(config)
        log.info("host %s started for %s (store %s)", __version__, self.owner, self.store_kind)
        return self._info()

    def _store_failed(self, message: str) -> None:
        log.error("task store unusable: %s", message)
        self.store_kind = FALLBACK
        self.port.notify_user(message, "error")

    def _reconfigure(self, config: Config) -> None:
        """`setup()` called again (a lazy.nvim reload): every option reaches
        the running host, except where its state lives (that needs a restart)."""
        assert self.config is not None and self.tasks is not None and self.calls is not None
        if config.state_dir != self.config.state_dir:
            self.port.notify_user(
                f"sidekick_tools: state_dir {config.state_dir} takes effect when the host "
                f"restarts; it stays {self.config.state_dir} until then",
                "warn",
            )
            config.state_dir = self.config.state_dir
        self.config = config
        self.calls.config = config
        self.tasks.configure(config.tasks)
        self._report_config_problems(config)

    @rpc.request
    def rpc_settings(self) -> Any:
        """The configuration the host works with, and the task engine's settings
        in force (:checkhealth, and tests that setup() reached the host), and
        the kind of store in use ("sqlite", "memory" or the memory fallback)."""
        assert self.config is not None and self.tasks is not None
        return {
            "config": dataclasses.asdict(self.config),
            "tasks": self.tasks.settings(),
            "store": self.store_kind,
        }

    def _report_config_problems(self, config: Config) -> None:
        """Entries of auto_accept that cannot be used (they approve nothing): say so."""
        auto = config.auto_accept
        for problem in command_table.table_for(auto.safe_commands, auto.command_forms).problems:
            log.warning("configuration: %s", problem)
            self.port.notify_user(f"sidekick_tools: {problem}", "warn")

    def _info(self) -> dict[str, Any]:
        assert self.config is not None
        return {
            "version": __version__,
            "state_dir": self.config.state_dir,
            "store": self.store_kind,
            "owner": self.owner,
            "pid": os.getpid(),
        }

    @rpc.request
    def rpc_run_tool(
        self, buf: int, row: int, cwd: str | None = None, confirmed: bool = False
    ) -> Any:
        """The call at `row`, then the chain; `{"confirm": question}` when it
        leads outside the working directory where its text does not show it
        (asked again with `confirmed` once the user said yes)."""
        cwd = str(cwd) if cwd else self._cwd()
        return self._run_request(
            lambda gate: self.calls.run_tool(int(buf), int(row), cwd, gate, bool(confirmed))
        )

    @rpc.request
    def rpc_run_tools(self, buf: int, cwd: str | None = None, ids: Any = None) -> Any:
        """Run the pending calls of the last assistant message; with `ids`, only
        those (the ones the user agreed to in :SidekickRunTools' question): a
        list of ids, or a map of each id to the `seen` digest `plan` gave its
        text (a call whose text is no longer the one asked about is not run)."""
        cwd = str(cwd) if cwd else self._cwd()
        chosen: Any = None
        if isinstance(ids, dict):
            chosen = {str(k): str(v) for k, v in ids.items()}
        elif ids is not None:
            chosen = [str(i) for i in _list(ids)]
        return self._run_request(lambda gate: self.calls.run_tools(int(buf), cwd, gate, chosen))

    def _run_request(self, start: Callable[[asyncio.Future[None]], Any]) -> Any:
        """Answer a run request before its first call starts working: the first
        call waits on `gate`, which opens once this handler has returned, i.e.
        once pynvim has sent the reply, so Neovim draws the running state
        before the task spawns (bench/ANALYSIS.md has the measurements)."""
        loop = self.port.loop
        gate: asyncio.Future[None] = loop.create_future()
        try:
            return self.port.block_on(self._with_events(start(gate)))
        finally:
            loop.call_soon(_open_gate, gate)

    async def _with_events(self, started: Any) -> dict[str, Any]:
        """The reply to a run request, with the events its calls emitted by then
        (the first call's running state): sent on their own next to a reply,
        Neovim may leave them unread until the host sends something else
        (neovim/neovim#12722)."""
        reply = await started
        await asyncio.sleep(0)  # the started chain runs up to its first state change
        reply["events"] = self.port.take_events()
        return reply

    @rpc.request
    def rpc_plan(self, buf: int, cwd: str | None = None) -> Any:
        cwd = str(cwd) if cwd else self._cwd()
        return self.port.block_on(self.calls.plan(int(buf), cwd))

    @rpc.request
    def rpc_deny(
        self, buf: int, row: int, reason: str | None = None, cwd: str | None = None
    ) -> Any:
        cwd = str(cwd) if cwd else self._cwd()
        return self.port.block_on(self.calls.deny(int(buf), int(row), str(reason or ""), cwd))

    @rpc.request
    def rpc_run_call(
        self,
        buf: int,
        call_id: str,
        cwd: str | None = None,
        token: str | None = None,
        confirmed: bool = False,
    ) -> Any:
        cwd = str(cwd) if cwd else self._cwd()
        token = str(token) if token else None
        return self._run_request(
            lambda _gate: self.calls.run_call(int(buf), str(call_id), cwd, token, bool(confirmed))
        )

    @rpc.request
    def rpc_send(self, buf: int, cwd: str | None = None, trusted: Any = None) -> Any:
        """:SidekickSend: the chat to its model; the reply streams in (DESIGN §10).
        `trusted`: the providers the user chose for this chat (or true: any)."""
        cwd = str(cwd) if cwd else self._cwd()
        return self.port.block_on(self.calls.send(int(buf), cwd, trusted))

    @rpc.request
    def rpc_stop(self, buf: int) -> Any:
        """:SidekickStop: the reply streaming into `buf` ends now; the loop is disarmed."""
        return self.calls.stop(int(buf))

    @rpc.notification
    def rpc_chat_opened(self, buf: int) -> Any:
        """A chat's BufReadPost (or BufNewFile): its text is the file's."""
        self.port.block_on(self.calls.chat_opened(int(buf), read=True))
        return True

    @rpc.notification
    def rpc_chat_saved(self, buf: int) -> Any:
        """A buffer was written to its file (BufWritePost): its results are on disk."""
        self.calls.saved(int(buf))
        return True

    @rpc.notification
    def rpc_chat_renamed(self, buf: int, name: str) -> Any:
        """A buffer was given another file name (`:saveas`, `:file`): the tasks
        of its calls are this chat's under the new name."""
        self.calls.renamed(int(buf), str(name))
        return True

    @rpc.request
    def rpc_halt(self, token: str | None, buf: int | None = None, row: int | None = None) -> Any:
        if not token:
            if buf is not None and row is not None:
                self.port.block_on(self.port.mirror(int(buf)))
                token = self.calls.token_at(int(buf), int(row), own=True)
            if not token:
                raise UserError(
                    "sidekick_tools: no task under the cursor; give a token: :SidekickHalt TOKEN"
                )
        grace = self.config.tasks.halt_grace if self.config else 0
        return halt_answer(self.tasks, self.port, token, grace)

    @rpc.request
    def rpc_list_tasks(self, opts: dict[str, Any] | None = None) -> Any:
        status, owner, chats = _task_filter(opts, self.owner)
        opts = dict(opts or {})
        tasks = self.tasks.list(
            status=status,
            owner=owner,
            chats=chats,
            limit=int(opts.get("limit") or 100),
            offset=int(opts.get("offset") or 0),
        )
        self.tasks.adopt_orphans_among(tasks)
        return [task_view(t) for t in tasks]

    @rpc.request
    def rpc_get_task(self, token: str) -> Any:
        task = self.tasks.get(str(token))
        return task_view(task) if task is not None else None

    @rpc.request
    def rpc_shutdown(self) -> Any:
        self.close()
        return True

    @rpc.notification
    def rpc_detach(self) -> Any:
        """The host is being replaced (:SidekickInstall starts one with the new
        Python): its tasks are left running for the next host, which takes
        them over as after a crash, whatever `kill_on_exit` says."""
        self._shut_down = True
        return True

    @rpc.request
    def rpc_ping(self) -> Any:
        return "pong"

    # -- life cycle --------------------------------------------------------------------
    def close(self) -> None:
        """Neovim is leaving (or gone): halt this instance's tasks if configured."""
        if self._shut_down or self.tasks is None or self.config is None:
            return
        self._shut_down = True
        try:  # an MCP client's task taken over here follows mcp.kill_on_exit
            self.port.block_on(self.tasks.shutdown(kill=self.config.halts_on_exit))
        except Exception:
            log.exception("shutdown failed")

    def _cwd(self) -> str:
        """Neovim's working directory, for callers that did not send theirs along."""
        return str(self.port.block_on(self.port.call("nvim_call_function", "getcwd", [])))

    # -- task views (tasks window, output view) ----------------------------------------
    @rpc.request
    def rpc_count_tasks(self, opts: dict[str, Any] | None = None) -> Any:
        """How many tasks `list_tasks(opts)` pages through (limit/offset ignored)."""
        status, owner, chats = _task_filter(opts, self.owner)
        return self.tasks.count(status=status, owner=owner, chats=chats)

    @rpc.request
    def rpc_task_page(self, opts: dict[str, Any] | None = None) -> Any:
        """One page of `list_tasks(opts)` plus the total, in one round trip."""
        return {
            "tasks": self.rpc_list_tasks(opts),
            "total": self.rpc_count_tasks(opts),
            "owner": self.owner,
        }

    @rpc.notification
    def rpc_mask_output(self, seq: int, raws: list[Any], keys: Any = None) -> Any:
        """The output view's new raw lines, by stream (each stream's lines as
        one string, or false for none), each stream's masked
        (`secrets_mask.mask_stream`; `keys`: whether each ended its last piece
        inside a private key) in a worker thread, then sent back as a `masked`
        event with `seq`, and where each stream ends now."""

        async def work() -> None:
            try:
                safe, inside = await asyncio.to_thread(_masked_streams, raws, keys)
            except Exception:
                log.exception("masking output failed")
                safe = inside = None  # not shown: never unmasked
            self.port.emit({"type": "masked", "seq": seq, "raws": safe, "keys": inside})

        fut = asyncio.ensure_future(work(), loop=self.port.loop)
        self._masking.add(fut)
        fut.add_done_callback(self._masking.discard)
        return True

    @rpc.request
    def rpc_task_at(self, buf: int, row: int) -> Any:
        """Token of the task of the call at (buf, row), or None."""
        self.port.block_on(self.port.mirror(int(buf)))
        return self.calls.token_at(int(buf), int(row))


def _masked_streams(texts: list[Any], keys: Any) -> tuple[list[Any], list[bool]]:
    """Each stream's text masked (false: none), and whether it ends inside a
    private key."""
    keys = keys if isinstance(keys, list) else []
    out, inside = [], []
    for i, text in enumerate(texts):
        in_key = i < len(keys) and keys[i] is True
        if not isinstance(text, str):
            out.append(False)
            inside.append(in_key)
            continue
        lines, in_key = mask_stream(text.split("\n"), in_key)
        out.append("\n".join(lines))
        inside.append(in_key)
    return out, inside


def _task_filter(
    opts: dict[str, Any] | None, owner: str
) -> tuple[str | None, str | None, list[str] | None]:
    """(status, owner, chats) of a task query from Lua's options.

    ``status`` "all" (or none) means every status. The scope is this
    Neovim's tasks: the ones it (``owner``) owns, and the ones started from the chats
    given in ``chats`` (the chats open in it: after a restart their tasks
    belong to the Neovim that ran them). ``owner = "any"`` (or ``all``):
    every Neovim's and agent's tasks."""
    opts = dict(opts or {})
    status = opts.get("status") or None
    if status == "all":
        status = None
    if status is not None and status not in NAMES:
        raise UserError(
            f"sidekick_tools: unknown status {status!r}; use one of " + ", ".join((*NAMES, "all"))
        )
    if opts.get("all") or opts.get("owner") == "any":
        return status, None, None
    chats = [str(c) for c in _list(opts.get("chats")) if c]
    return status, owner, chats or None


def _list(value: Any) -> list[Any]:
    """A Lua list (an empty one may arrive as a dict)."""
    if isinstance(value, dict):
        return list(value.values())
    return list(value or [])


def _open_gate(gate: asyncio.Future[None]) -> None:
    if not gate.done():
        gate.set_result(None)


def _message(exc: BaseException) -> str:
    return str(exc.args[0]) if exc.args else repr(exc)


def _error_response(msg: str) -> BaseException:
    from pynvim.msgpack_rpc.session import ErrorResponse

    return ErrorResponse(msg)
