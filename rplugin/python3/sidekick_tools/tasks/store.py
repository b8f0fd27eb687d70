"""Task persistence: `SqliteStore` (default, shared by every Neovim) and `MemoryStore`.

Both implement `TaskStore` with the same observable behaviour (the unit tests run
one suite against both). Stores hand out copies: mutating a returned `Task` has
no effect until it is passed back to `update()`.

SQLite specifics: WAL journal, `busy_timeout` 5000 ms, short transactions, one
connection per process. Several hosts (one per Neovim) may use the same file at
once; token allocation runs inside `BEGIN IMMEDIATE` so two hosts can never hand
out the same token, and `update(..., expect=...)` gives compare-and-set updates
for the places where two hosts could race (recovery, cross-instance halt).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import json
import os
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional, Protocol, TypeVar, Union

from .model import TERMINAL, Task, TaskStatus, is_token, new_token

SCHEMA_VERSION = 1

StatusFilter = Union[None, str, TaskStatus, Iterable[Union[str, TaskStatus]]]
Reserve = Callable[[Task], bool]

# Columns of the `tasks` table, in `Task` field order (token == Task.id).
_COLUMNS = (
    "token",
    "tool",
    "label",
    "command",
    "cwd",
    "env",
    "status",
    "reason",
    "exit_code",
    "pid",
    "pid_start",
    "owner",
    "chat",
    "call_id",
    "created_at",
    "started_at",
    "ended_at",
    "timeout",
    "progress",
    "progress_text",
    "lines",
    "log_dir",
    "summary",
    "error",
    "result_read",
)
_FIELD_TO_COLUMN = {c: c for c in _COLUMNS}
_FIELD_TO_COLUMN["id"] = "token"
del _FIELD_TO_COLUMN["token"]
UPDATABLE_FIELDS = frozenset(_FIELD_TO_COLUMN) - {"id"}
_CREATED_AT = _COLUMNS.index("created_at")

_MAX_ALLOC_ATTEMPTS = 64

_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (
    seq INTEGER PRIMARY KEY,
    token TEXT NOT NULL UNIQUE,
    tool TEXT NOT NULL DEFAULT '',
    label TEXT NOT NULL DEFAULT '',
    command TEXT NOT NULL DEFAULT '',
    cwd TEXT NOT NULL DEFAULT '',
    env TEXT NOT NULL DEFAULT '{}',
    status TEXT NOT NULL,
    reason TEXT,
    exit_code INTEGER,
    pid INTEGER,
    pid_start TEXT,
    owner TEXT NOT NULL DEFAULT '',
    chat TEXT NOT NULL DEFAULT '',
    call_id TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    started_at REAL,
    ended_at REAL,
    timeout REAL,
    progress INTEGER,
    progress_text TEXT,
    lines INTEGER NOT NULL DEFAULT 0,
    log_dir TEXT NOT NULL DEFAULT '',
    summary TEXT,
    error TEXT,
    result_read INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS tasks_created ON tasks (created_at);
CREATE INDEX IF NOT EXISTS tasks_status_created ON tasks (status, created_at);
CREATE INDEX IF NOT EXISTS tasks_owner_created ON tasks (owner, created_at);
CREATE INDEX IF NOT EXISTS tasks_owner_status_created ON tasks (owner, status, created_at);
CREATE INDEX IF NOT EXISTS tasks_status_ended ON tasks (status, ended_at);
CREATE INDEX IF NOT EXISTS tasks_chat_created ON tasks (chat, created_at);
CREATE TABLE IF NOT EXISTS read_offsets (
    token TEXT NOT NULL,
    chat TEXT NOT NULL,
    offset INTEGER NOT NULL,
    PRIMARY KEY (token, chat)
) WITHOUT ROWID;
"""


class StoreError(RuntimeError):
    """The store cannot be used; the message names the file and what to do."""


class DuplicateToken(StoreError):
    """`insert()` of a task whose explicit id is already stored."""


class TaskStore(Protocol):
    def insert(self, task: Task, reserve: Reserve | None = None) -> Task: ...
    def insert_many(self, tasks: Iterable[Task]) -> None: ...
    def update(
        self,
        task: Task,
        fields: Iterable[str] | None = None,
        *,
        expect: Mapping[str, Any] | None = None,
    ) -> bool: ...
    def get(self, token: str) -> Task | None: ...
    def list(
        self,
        status: StatusFilter = None,
        owner: str | None = None,
        limit: int | None = 100,
        offset: int = 0,
        chats: Iterable[str] | None = None,
    ) -> list[Task]: ...
    def count(
        self,
        status: StatusFilter = None,
        owner: str | None = None,
        chats: Iterable[str] | None = None,
    ) -> int: ...
    def delete(self, token: str) -> bool: ...
    def purge(self, now: float, retention: Any) -> list[str]: ...
    def mark_read(self, token: str) -> bool: ...
    def get_read_offset(self, token: str, chat: str) -> int: ...
    def set_read_offset(self, token: str, chat: str, offset: int) -> None: ...
    def close(self) -> None: ...


# --------------------------------------------------------------------------- helpers


def normalize_status(status: StatusFilter) -> frozenset[str] | None:
    """None/"all" -> None (no filter); a status or an iterable of them -> set of values."""
    if status is None:
        return None
    if isinstance(status, (str, TaskStatus)):
        if status == "all":
            return None
        return frozenset({TaskStatus(status).value})
    values = frozenset(TaskStatus(s).value for s in status)
    return None if len(values) == len(TaskStatus) else values


def retention_pair(retention: Any) -> tuple[float, float]:
    """(completed, failed) seconds from a tuple, a mapping or an object with attributes."""
    if isinstance(retention, Mapping):
        return float(retention["completed"]), float(retention["failed"])
    if hasattr(retention, "completed") and hasattr(retention, "failed"):
        return float(retention.completed), float(retention.failed)
    completed, failed = retention
    return float(completed), float(failed)


Scope = Optional[tuple[str, str]]  # ("owner" | "chat", value); None: every task


def _scopes(owner: str | None, chats: Iterable[str] | None) -> list[Scope]:
    """The index scans that together select `owner`'s tasks or `chats`' tasks."""
    scopes: list[Scope] = []
    if owner is not None:
        scopes.append(("owner", owner))
    for chat in sorted(set(chats or ())):
        scopes.append(("chat", chat))
    return scopes or [None]


def _where(scope: Scope, status: str | None) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if scope is not None:
        where.append(f"{scope[0]} = ?")
        params.append(scope[1])
    if status is not None:
        where.append("status = ?")
        params.append(status)
    return where, params


def _unique_rows(rows: Iterable[tuple]) -> Iterable[tuple]:
    """Rows without repeats (a task may be both the owner's and an open chat's)."""
    seen: set[str] = set()
    token = _COLUMNS.index("token")
    for row in rows:
        if row[token] not in seen:
            seen.add(row[token])
            yield row


def _purgeable(task: Task, now: float, completed: float, failed: float) -> bool:
    if task.status not in TERMINAL:
        return False
    keep = completed if task.status is TaskStatus.COMPLETED else failed
    ended = task.ended_at if task.ended_at is not None else task.created_at
    if ended >= now - keep:
        return False
    # Results nobody has read yet get a second retention period.
    return task.result_read or ended < now - 2 * keep


def _columns_for(fields: Iterable[str]) -> list[str]:
    cols = []
    for name in fields:
        if name == "read_offsets":
            continue
        if name not in UPDATABLE_FIELDS:
            raise ValueError(f"unknown or read-only task field: {name!r}")
        cols.append(_FIELD_TO_COLUMN[name])
    return cols


def _to_db(column: str, task: Task) -> Any:
    if column == "token":
        return task.id
    value = getattr(task, column)
    if column == "env":
        return json.dumps(value or {}, sort_keys=True)
    if column == "status":
        return TaskStatus(value).value
    if column == "result_read":
        return 1 if value else 0
    return value


def _from_row(row: sqlite3.Row | tuple) -> Task:
    values = dict(zip(_COLUMNS, row))
    values["id"] = values.pop("token")
    values["env"] = json.loads(values["env"] or "{}")
    values["result_read"] = bool(values["result_read"])
    return Task(**values)


_T = TypeVar("_T")


def _guarded(method: Callable[..., _T]) -> Callable[..., _T]:
    """Run under the connection lock; turn sqlite errors into StoreError naming the file."""

    @functools.wraps(method)
    def wrapper(self: SqliteStore, *args: Any, **kwargs: Any) -> _T:
        with self._lock:
            if self._conn is None:
                raise StoreError(f"task database {self.path} is closed")
            try:
                return method(self, *args, **kwargs)
            except sqlite3.Error as exc:
                if self._conn.in_transaction:
                    try:
                        self._conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                raise StoreError(f"task database {self.path}: {exc}") from exc

    return wrapper


# --------------------------------------------------------------------------- SQLite


class SqliteStore:
    """Tasks in an SQLite file shared by every Neovim instance of the user."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(os.path.expanduser(path))
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        try:
            self._conn = self._open()
        except (sqlite3.Error, OSError, ValueError) as exc:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            raise StoreError(
                f"cannot use task database {self.path}: {exc}. Move the file aside (or "
                f"delete it) to start a new task history; until then tasks are kept in "
                f"memory only and are lost when Neovim exits."
            ) from exc

    def _open(self) -> sqlite3.Connection:
        parent = os.path.dirname(self.path)
        if not os.path.isdir(parent):
            os.makedirs(parent, mode=0o700, exist_ok=True)
            os.chmod(parent, 0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            st = os.fstat(fd)
            if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) != 0o600:
                os.fchmod(fd, 0o600)
        finally:
            os.close(fd)
        conn = sqlite3.connect(
            self.path, timeout=5.0, isolation_level=None, check_same_thread=False
        )
        self._conn = conn
        conn.execute("PRAGMA busy_timeout = 5000")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"cannot switch to WAL journal (got {mode!r})")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Not executescript(): it would COMMIT first; run the statements one by one.
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
            version = row[0]
            if version is None:
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            elif version > SCHEMA_VERSION:
                raise ValueError(
                    f"schema version {version} was written by a newer sidekick-tools "
                    f"(this one knows {SCHEMA_VERSION})"
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return conn

    # -- writing ----------------------------------------------------------------

    @_guarded
    def insert(self, task: Task, reserve: Reserve | None = None) -> Task:
        """Store a new task and return a copy with its token.

        With an empty `task.id` a fresh token is allocated: inside one
        `BEGIN IMMEDIATE` transaction a random token is checked against the
        table and against `reserve(candidate)` when given, then inserted;
        collisions retry with another token. `reserve` receives the copy about
        to be stored, its `id` already set: it may claim something named after
        the token (the log directory) and fill in fields derived from it; it
        returns False when the token is unusable.
        An explicit `task.id` is inserted as is (`DuplicateToken` if taken).
        """
        assert self._conn is not None
        task = task.copy()
        explicit = bool(task.id)
        if explicit and not is_token(task.id):
            raise ValueError(f"invalid task token {task.id!r}")
        conn = self._conn
        sql = f"INSERT INTO tasks ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
        conn.execute("BEGIN IMMEDIATE")
        try:
            for _ in range(_MAX_ALLOC_ATTEMPTS):
                token = task.id if explicit else new_token()
                taken = conn.execute("SELECT 1 FROM tasks WHERE token = ?", (token,)).fetchone()
                task.id = token
                if taken or (reserve is not None and not reserve(task)):
                    if explicit:
                        raise DuplicateToken(f"task token {token} is already in use")
                    continue
                conn.execute(sql, [_to_db(c, task) for c in _COLUMNS])
                conn.executemany(
                    "INSERT OR REPLACE INTO read_offsets (token, chat, offset) VALUES (?, ?, ?)",
                    [(token, chat, int(off)) for chat, off in task.read_offsets.items()],
                )
                conn.execute("COMMIT")
                return task.copy()
            raise StoreError(f"task database {self.path}: could not allocate a free task token")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @_guarded
    def insert_many(self, tasks: Iterable[Task]) -> None:
        """Bulk insert of tasks that already carry their tokens (one transaction)."""
        assert self._conn is not None
        sql = f"INSERT INTO tasks ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
        rows = ([_to_db(c, t) for c in _COLUMNS] for t in tasks)
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(sql, rows)
            conn.execute("COMMIT")
        except sqlite3.IntegrityError as exc:
            conn.execute("ROLLBACK")
            raise DuplicateToken(f"task database {self.path}: {exc}") from exc
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @_guarded
    def update(
        self,
        task: Task,
        fields: Iterable[str] | None = None,
        *,
        expect: Mapping[str, Any] | None = None,
    ) -> bool:
        """Write `fields` of `task` (all fields when None); True if the row changed.

        `expect` maps field names to the values the stored row must still have
        (compare-and-set, e.g. `expect={"status": "running"}`); when they do
        not match, nothing is written and False is returned.
        """
        assert self._conn is not None
        names = list(UPDATABLE_FIELDS if fields is None else fields)
        cols = _columns_for(names)
        where, params = ["token = ?"], [task.id]
        for name, value in (expect or {}).items():
            col = _columns_for([name])[0]
            if value is None:
                where.append(f"{col} IS NULL")
            else:
                where.append(f"{col} = ?")
                params.append(TaskStatus(value).value if col == "status" else value)
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            if cols:
                sets = ", ".join(f"{c} = ?" for c in cols)
                cur = conn.execute(
                    f"UPDATE tasks SET {sets} WHERE {' AND '.join(where)}",
                    [_to_db(c, task) for c in cols] + params,
                )
                changed = cur.rowcount > 0
            else:
                changed = (
                    conn.execute(
                        f"SELECT 1 FROM tasks WHERE {' AND '.join(where)}", params
                    ).fetchone()
                    is not None
                )
            if changed and "read_offsets" in names:
                conn.execute("DELETE FROM read_offsets WHERE token = ?", (task.id,))
                conn.executemany(
                    "INSERT INTO read_offsets (token, chat, offset) VALUES (?, ?, ?)",
                    [(task.id, chat, int(off)) for chat, off in task.read_offsets.items()],
                )
            conn.execute("COMMIT")
            return changed
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @_guarded
    def delete(self, token: str) -> bool:
        assert self._conn is not None
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            cur = conn.execute("DELETE FROM tasks WHERE token = ?", (token,))
            conn.execute("DELETE FROM read_offsets WHERE token = ?", (token,))
            conn.execute("COMMIT")
            return cur.rowcount > 0
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @_guarded
    def purge(self, now: float, retention: Any) -> list[str]:
        """Delete finished tasks past retention; return their tokens.

        completed: `ended_at` older than retention.completed; failed and
        cancelled: older than retention.failed. A result never read
        (`result_read` false) is kept for twice its retention. Queued and
        running tasks are never purged.
        """
        assert self._conn is not None
        completed, failed = retention_pair(retention)
        conn = self._conn
        sql = """
            SELECT token FROM tasks
            WHERE status = ? AND coalesce(ended_at, created_at) < ?
              AND (result_read = 1 OR coalesce(ended_at, created_at) < ?)
        """
        conn.execute("BEGIN IMMEDIATE")
        try:
            tokens: list[str] = []
            for st, keep in (
                (TaskStatus.COMPLETED, completed),
                (TaskStatus.FAILED, failed),
                (TaskStatus.CANCELLED, failed),
            ):
                rows = conn.execute(sql, (st.value, now - keep, now - 2 * keep)).fetchall()
                tokens.extend(r[0] for r in rows)
            for chunk_start in range(0, len(tokens), 500):
                chunk = tokens[chunk_start : chunk_start + 500]
                marks = ", ".join("?" * len(chunk))
                conn.execute(f"DELETE FROM tasks WHERE token IN ({marks})", chunk)
                conn.execute(f"DELETE FROM read_offsets WHERE token IN ({marks})", chunk)
            conn.execute("COMMIT")
            return tokens
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @_guarded
    def mark_read(self, token: str) -> bool:
        assert self._conn is not None
        cur = self._conn.execute("UPDATE tasks SET result_read = 1 WHERE token = ?", (token,))
        return cur.rowcount > 0

    @_guarded
    def set_read_offset(self, token: str, chat: str, offset: int) -> None:
        assert self._conn is not None
        self._conn.execute(
            "INSERT OR REPLACE INTO read_offsets (token, chat, offset) VALUES (?, ?, ?)",
            (token, chat, int(offset)),
        )

    # -- reading ----------------------------------------------------------------

    @_guarded
    def get_read_offset(self, token: str, chat: str) -> int:
        assert self._conn is not None
        row = self._conn.execute(
            "SELECT offset FROM read_offsets WHERE token = ? AND chat = ?", (token, chat)
        ).fetchone()
        return int(row[0]) if row else 0

    @_guarded
    def get(self, token: str) -> Task | None:
        assert self._conn is not None
        row = self._conn.execute(
            f"SELECT {', '.join(_COLUMNS)} FROM tasks WHERE token = ?", (token,)
        ).fetchone()
        if row is None:
            return None
        task = _from_row(row)
        self._attach_offsets([task])
        return task

    def _attach_offsets(self, tasks: list[Task]) -> None:
        assert self._conn is not None
        if not tasks:
            return
        by_token = {t.id: t for t in tasks}
        tokens = list(by_token)
        for i in range(0, len(tokens), 500):  # stay under SQLite's variable limit
            chunk = tokens[i : i + 500]
            marks = ", ".join("?" * len(chunk))
            for token, chat, off in self._conn.execute(
                f"SELECT token, chat, offset FROM read_offsets WHERE token IN ({marks})", chunk
            ):
                by_token[token].read_offsets[chat] = int(off)

    def _select(
        self, where: list[str], params: list[Any], limit: int | None, offset: int
    ) -> list[tuple]:
        assert self._conn is not None
        sql = f"SELECT {', '.join(_COLUMNS)}, seq FROM tasks"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, seq DESC"
        if limit is not None:
            sql += " LIMIT ? OFFSET ?"
            params = params + [int(limit), int(offset)]
        elif offset:
            sql += " LIMIT -1 OFFSET ?"
            params = params + [int(offset)]
        return self._conn.execute(sql, params).fetchall()

    @_guarded
    def list(
        self,
        status: StatusFilter = None,
        owner: str | None = None,
        limit: int | None = 100,
        offset: int = 0,
        chats: Iterable[str] | None = None,
    ) -> list[Task]:
        """Tasks newest first (by `created_at`, then insertion order).

        `owner` and `chats` together select the tasks of that owner OR started
        from one of those chats. Every query walks an index in order and stops
        after `offset + limit` rows, so a page costs the same with 100 or
        100,000 stored tasks. Several statuses, or an owner with chats, are
        answered by merging one indexed query per (status, owner or chat).
        """
        statuses = normalize_status(status)
        scopes = _scopes(owner, chats)
        status_list: list[str | None] = sorted(statuses) if statuses else [None]
        upto = None if limit is None else offset + limit
        if len(scopes) * len(status_list) == 1:
            where, params = _where(scopes[0], status_list[0])
            rows = self._select(where, params, limit, offset)
        else:
            streams = [
                self._select(*_where(scope, st), upto, 0) for scope in scopes for st in status_list
            ]
            merged = heapq.merge(*streams, key=lambda r: (r[_CREATED_AT], r[-1]), reverse=True)
            rows = list(itertools.islice(_unique_rows(merged), offset, upto))
        tasks = [_from_row(r[:-1]) for r in rows]
        self._attach_offsets(tasks)
        return tasks

    @_guarded
    def count(
        self,
        status: StatusFilter = None,
        owner: str | None = None,
        chats: Iterable[str] | None = None,
    ) -> int:
        assert self._conn is not None
        statuses = normalize_status(status)
        where, params = [], []
        scope = []
        if owner is not None:
            scope.append("owner = ?")
            params.append(owner)
        chat_list = sorted(set(chats or ()))
        if chat_list:
            scope.append(f"chat IN ({', '.join('?' * len(chat_list))})")
            params.extend(chat_list)
        if scope:
            where.append("(" + " OR ".join(scope) + ")")
        if statuses is not None:
            where.append(f"status IN ({', '.join('?' * len(statuses))})")
            params.extend(sorted(statuses))
        sql = "SELECT count(*) FROM tasks" + (" WHERE " + " AND ".join(where) if where else "")
        return int(self._conn.execute(sql, params).fetchone()[0])

    def explain_list(self, status: StatusFilter = None, owner: str | None = None) -> str:
        """The query plan `list()` uses (diagnostics and tests)."""
        statuses = normalize_status(status)
        where, params = [], []
        if owner is not None:
            where.append("owner = ?")
            params.append(owner)
        if statuses:
            where.append("status = ?")
            params.append(sorted(statuses)[0])
        sql = f"EXPLAIN QUERY PLAN SELECT {', '.join(_COLUMNS)} FROM tasks"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, seq DESC LIMIT 50"
        with self._lock:
            assert self._conn is not None
            return "\n".join(str(r[-1]) for r in self._conn.execute(sql, params))

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


# --------------------------------------------------------------------------- memory


class MemoryStore:
    """Same behaviour as `SqliteStore`, kept in this process only (`store = "memory"`)."""

    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}
        self._seq: dict[str, int] = {}
        self._offsets: dict[str, dict[str, int]] = {}
        self._counter = itertools.count(1)
        self._lock = threading.RLock()

    def _out(self, token: str) -> Task:
        task = self._tasks[token].copy()
        task.read_offsets = dict(self._offsets.get(token, {}))
        return task

    def _put(self, task: Task) -> None:
        stored = task.copy()
        self._offsets[task.id] = dict(stored.read_offsets)
        stored.read_offsets = {}
        self._tasks[task.id] = stored
        self._seq[task.id] = next(self._counter)

    def insert(self, task: Task, reserve: Reserve | None = None) -> Task:
        with self._lock:
            task = task.copy()
            if task.id:
                if not is_token(task.id):
                    raise ValueError(f"invalid task token {task.id!r}")
                if task.id in self._tasks or (reserve is not None and not reserve(task)):
                    raise DuplicateToken(f"task token {task.id} is already in use")
            else:
                for _ in range(_MAX_ALLOC_ATTEMPTS):
                    token = new_token()
                    if token in self._tasks:
                        continue
                    task.id = token
                    if reserve is not None and not reserve(task):
                        continue
                    break
                else:
                    raise StoreError("in-memory task store: could not allocate a free task token")
            self._put(task)
            return self._out(task.id)

    def insert_many(self, tasks: Iterable[Task]) -> None:
        with self._lock:
            batch = [t.copy() for t in tasks]
            tokens = [t.id for t in batch]
            if len(set(tokens)) != len(tokens) or any(t in self._tasks for t in tokens):
                raise DuplicateToken("in-memory task store: duplicate task token in batch")
            for t in batch:
                if not is_token(t.id):
                    raise ValueError(f"invalid task token {t.id!r}")
                self._put(t)

    def update(
        self,
        task: Task,
        fields: Iterable[str] | None = None,
        *,
        expect: Mapping[str, Any] | None = None,
    ) -> bool:
        with self._lock:
            names = list(UPDATABLE_FIELDS if fields is None else fields)
            _columns_for(names)  # validates
            stored = self._tasks.get(task.id)
            if stored is None:
                return False
            for name, value in (expect or {}).items():
                _columns_for([name])
                current = getattr(stored, name)
                if name == "status":
                    if value is None or current is not TaskStatus(value):
                        return False
                elif current != value:
                    return False
            for name in names:
                if name == "read_offsets":
                    self._offsets[task.id] = dict(task.read_offsets)
                    continue
                value = getattr(task, name)
                if name == "env":
                    value = dict(value or {})
                elif name == "status":
                    value = TaskStatus(value)
                elif name == "result_read":
                    value = bool(value)
                setattr(stored, name, value)
            return True

    def get(self, token: str) -> Task | None:
        with self._lock:
            return self._out(token) if token in self._tasks else None

    def _matching(
        self, statuses: frozenset[str] | None, owner: str | None, chats: Iterable[str] | None
    ) -> list[str]:
        chat_set = set(chats or ())
        return [
            token
            for token, t in self._tasks.items()
            if (statuses is None or t.status.value in statuses)
            and ((owner is None and not chat_set) or t.owner == owner or t.chat in chat_set)
        ]

    def list(
        self,
        status: StatusFilter = None,
        owner: str | None = None,
        limit: int | None = 100,
        offset: int = 0,
        chats: Iterable[str] | None = None,
    ) -> list[Task]:
        with self._lock:
            tokens = self._matching(normalize_status(status), owner, chats)
            tokens.sort(key=lambda tok: (self._tasks[tok].created_at, self._seq[tok]), reverse=True)
            end = None if limit is None else offset + limit
            return [self._out(tok) for tok in tokens[offset:end]]

    def count(
        self,
        status: StatusFilter = None,
        owner: str | None = None,
        chats: Iterable[str] | None = None,
    ) -> int:
        with self._lock:
            return len(self._matching(normalize_status(status), owner, chats))

    def delete(self, token: str) -> bool:
        with self._lock:
            self._offsets.pop(token, None)
            self._seq.pop(token, None)
            return self._tasks.pop(token, None) is not None

    def purge(self, now: float, retention: Any) -> list[str]:
        completed, failed = retention_pair(retention)
        with self._lock:
            gone = [tok for tok, t in self._tasks.items() if _purgeable(t, now, completed, failed)]
            for tok in gone:
                self.delete(tok)
            return gone

    def mark_read(self, token: str) -> bool:
        with self._lock:
            task = self._tasks.get(token)
            if task is None:
                return False
            task.result_read = True
            return True

    def get_read_offset(self, token: str, chat: str) -> int:
        with self._lock:
            return int(self._offsets.get(token, {}).get(chat, 0))

    def set_read_offset(self, token: str, chat: str, offset: int) -> None:
        with self._lock:
            self._offsets.setdefault(token, {})[chat] = int(offset)

    def close(self) -> None:
        pass


def open_store(kind: str, path: str | None) -> tuple[TaskStore, str | None]:
    """The configured store, falling back to memory: (store, warning or None)."""
    if kind == "memory" or not path:
        return MemoryStore(), None
    try:
        return SqliteStore(path), None
    except StoreError as exc:
        return MemoryStore(), str(exc)
