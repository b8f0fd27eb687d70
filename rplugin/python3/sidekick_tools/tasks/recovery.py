"""At host start: take stock of the store's unfinished tasks.

For every queued or running task not owned by another *live* Neovim (or MCP
server): queued -> failed "host restarted"; running with an exit record -> the
recorded exit; running with its process alive (pid + start token, never a
bare pid) -> adopted and supervised again, its remaining timeout included;
otherwise -> failed "host restarted". Another host racing for the same task
loses its compare-and-set and leaves it alone.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

from .identity import is_alive, owner_gone
from .log_follower import LogFollower
from .log_limit import LIMIT_ERROR, cut_at_exit
from .model import ACTIVE, Reason, Task, TaskStatus, transition
from .on_exit_summarize import combine_summary, scan_for_summary, take_counts
from .process import AdoptedProcess, Outcome
from .store import StoreError, TaskQuery
from .supervisor import FINAL_FIELDS, StopRequest, settle
from .wrapper import find_supervisor, read_exit

if TYPE_CHECKING:
    from .engine import TaskEngine

log = logging.getLogger(__name__)


async def recover(engine: TaskEngine) -> None:
    try:
        unfinished = engine.store.list(TaskQuery.of(ACTIVE), limit=None)
    except StoreError:
        log.exception("recovery skipped: the task store cannot be read")
        return
    gone: dict[str, bool] = {}
    for task in unfinished:
        if engine.supervises(task.id):
            continue
        if task.owner != engine.owner and not owner_gone(task.owner, gone):
            continue  # a live Neovim's (or MCP server's) task: not ours to touch
        try:
            await _recover_one(engine, task)
        except StoreError:
            log.exception("task %s: recovery failed", task.id)


def _started_unrecorded(task: Task) -> bool:
    """A queued task whose supervisor wrapper did start (it is alive, or it
    opened the logs, its first act): now `running`, with the wrapper's identity
    when it still lives."""
    if not task.log_dir:
        return False
    found = find_supervisor(task.log_dir)
    if found is None and not os.path.exists(os.path.join(task.log_dir, "stdout")):
        return False
    transition(task, TaskStatus.RUNNING)
    if found is not None:
        task.pid, task.pid_start = found
    return True


async def _recover_one(engine: TaskEngine, task: Task) -> None:
    expect = {"status": task.status.value, "owner": task.owner}
    started: tuple[str, ...] = ()  # fields of a start the store never heard of
    if task.status is TaskStatus.QUEUED and _started_unrecorded(task):
        # Its wrapper started, but the host died before saving that: it runs
        # (or ran) once, and is taken up as a running task, never started again.
        started = ("status", "started_at", "pid", "pid_start")
    elif task.status is TaskStatus.QUEUED:
        transition(task, TaskStatus.FAILED, reason=Reason.HOST_RESTARTED)
        task.error = "the task never started: its Neovim or host exited first"
        if engine.save(task, ("status", "reason", "ended_at", "error"), expect=expect):
            engine.emit("finished", task)
        return
    # Alive first, then the record: a wrapper found dead has written all it will.
    alive = is_alive(task.pid, task.pid_start)
    record = read_exit(task.log_dir) if task.log_dir else None
    if record is None and alive:
        task.owner = engine.owner
        if not engine.save(task, ("owner", *started), expect=expect):
            return  # another instance adopted it first
        assert task.pid is not None
        poll = engine.tuning.adopted_poll_interval
        engine.adopt(task, AdoptedProcess(task.pid, task.pid_start, task.log_dir, poll))
        engine.emit("updated", task)
        return
    limit = int(engine.config.max_log_bytes or 0)
    over = record is not None and cut_at_exit(task, limit)
    follower = LogFollower(task.log_path or os.devnull)
    loop = asyncio.get_running_loop()
    out, err = await loop.run_in_executor(None, scan_for_summary, task, follower)
    if record is not None:
        stop = StopRequest(Reason.LOG_LIMIT, LIMIT_ERROR.format(limit=limit)) if over else None
        settle(task, Outcome(record.code, None, record.ended_at, True), stop)
    else:
        transition(task, TaskStatus.FAILED, reason=Reason.HOST_RESTARTED)
        task.error = "the host restarted and the task's process is gone"
    task.summary = combine_summary(task.status, out, err)
    take_counts(task, follower)
    fields = (*FINAL_FIELDS, *(f for f in started if f not in FINAL_FIELDS))
    if engine.save(task, fields, expect=expect):
        engine.emit("finished", task)
