"""`SqliteStore`: tasks in `<state_dir>/tasks.db`, shared by every Neovim of the user.

WAL journal, short transactions, one connection per process. Several hosts
(one per Neovim) may use the file at once: token allocation runs inside
`BEGIN IMMEDIATE`, so two hosts never hand out the same token, and
`update(..., expect=...)` is a compare-and-set for the places where two hosts
could race (recovery, halting another instance's task). A lock held by another
program makes an operation fail after `busy_timeout` seconds with `StoreBusy`
instead of waiting: the engine's `BufferedStore` decides what to do meanwhile.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import os
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Optional, TypeVar

from ..model import Task, TaskStatus, is_token
from .base import Expect, Fields, Reserve, allocate_token, fields_to_write, retention_pair
from .errors import DuplicateToken, StoreBusy, StoreError
from .query import TaskQuery
from .schema import (
    COLUMNS,
    NewerSchema,
    bring_up_to_date,
    check_version,
    column_of,
    from_row,
    to_db,
)

DEFAULT_BUSY_TIMEOUT = 0.05  # seconds an operation waits for another program's lock

_CREATED_AT = COLUMNS.index("created_at")
_TOKEN = COLUMNS.index("token")
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM tasks"
_INSERT = f"INSERT INTO tasks ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
_OFFSET = "INSERT OR REPLACE INTO read_offsets (token, chat, offset) VALUES (?, ?, ?)"

Scope = Optional[tuple[str, str]]  # ("owner" | "chat", value); None: every task


def _scopes(owner: str | None, chats: Iterable[str]) -> list[Scope]:
    """The index scans that together select `owner`'s tasks or `chats`' tasks."""
    scopes: list[Scope] = []
    if owner is not None:
        scopes.append(("owner", owner))
    for chat in sorted(chats):
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
    for row in rows:
        if row[_TOKEN] not in seen:
            seen.add(row[_TOKEN])
            yield row


def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    text = str(exc).lower()
    return "locked" in text or "busy" in text


_T = TypeVar("_T")


def _guarded(method: Callable[..., _T]) -> Callable[..., _T]:
    """Run under the connection lock; turn sqlite errors into StoreBusy / StoreError."""

    @functools.wraps(method)
    def wrapper(self: SqliteStore, *args: Any, **kwargs: Any) -> _T:
        with self._lock:
            if self._conn is None:
                raise StoreError(f"task database {self.path} is closed")
            try:
                return method(self, *args, **kwargs)
            except sqlite3.Error as exc:
                if self._conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self._conn.execute("ROLLBACK")
                if _is_busy(exc):
                    raise StoreBusy(
                        f"task database {self.path} is locked by another program ({exc})"
                    ) from exc
                raise StoreError(f"task database {self.path}: {exc}") from exc

    return wrapper


class SqliteStore:
    """Tasks in an SQLite file shared by every Neovim instance of the user."""

    def __init__(self, path: str, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> None:
        self.path = os.path.abspath(os.path.expanduser(path))
        self.busy_timeout = busy_timeout
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        try:
            self._conn = self._open()
        except (sqlite3.Error, OSError, ValueError) as exc:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            if isinstance(exc, sqlite3.Error) and _is_busy(exc):
                raise StoreBusy(
                    f"cannot use task database {self.path}: it is locked by another program ({exc})"
                ) from exc
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
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
        conn = sqlite3.connect(
            self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
        )
        self._conn = conn
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        check_version(conn)  # read only: a newer file is left as it is
        st = os.stat(self.path)
        if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) != 0o600:
            os.chmod(self.path, 0o600)
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"cannot switch to WAL journal (got {mode!r})")
        conn.execute("PRAGMA synchronous = NORMAL")
        with self._transaction():
            bring_up_to_date(conn)
        return conn

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (`BEGIN IMMEDIATE`): committed, or rolled back on error."""
        conn = self._conn
        assert conn is not None
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    # -- writing ----------------------------------------------------------------

    @_guarded
    def insert(self, task: Task, reserve: Reserve | None = None) -> Task:
        """Store a new task and return a copy with its token.

        With an empty `task.id` a fresh token is allocated: inside one
        transaction a random token is checked against the table and against
        `reserve(candidate)` when given, then inserted; collisions retry with
        another token. An explicit `task.id` is inserted as is
        (`DuplicateToken` if taken).
        """
        task = task.copy()
        if task.id and not is_token(task.id):
            raise ValueError(f"invalid task token {task.id!r}")
        with self._transaction() as conn:

            def taken(token: str) -> bool:
                return conn.execute("SELECT 1 FROM tasks WHERE token = ?", (token,)).fetchone()

            if not task.id:
                allocate_token(task, taken, reserve)
            elif taken(task.id) or (reserve is not None and not reserve(task)):
                raise DuplicateToken(f"task token {task.id} is already in use")
            conn.execute(_INSERT, [to_db(c, task) for c in COLUMNS])
            self._write_offsets(conn, task)
            return task.copy()

    @_guarded
    def insert_many(self, tasks: Iterable[Task]) -> None:
        """Bulk insert of tasks that already carry their tokens (one transaction)."""
        batch = list(tasks)
        offsets = [(t.id, chat, int(off)) for t in batch for chat, off in t.read_offsets.items()]
        try:
            with self._transaction() as conn:
                conn.executemany(_INSERT, ([to_db(c, t) for c in COLUMNS] for t in batch))
                conn.executemany(_OFFSET, offsets)
        except sqlite3.IntegrityError as exc:
            raise DuplicateToken(f"task database {self.path}: {exc}") from exc

    @staticmethod
    def _write_offsets(conn: sqlite3.Connection, task: Task) -> None:
        conn.executemany(_OFFSET, [(task.id, c, int(off)) for c, off in task.read_offsets.items()])

    @_guarded
    def update(self, task: Task, fields: Fields = None, *, expect: Expect = None) -> bool:
        """Write `fields` of `task` (all fields when None); True if the row changed.

        `expect` maps field names to the values the stored row must still have
        (compare-and-set, e.g. `expect={"status": "running"}`); when they do
        not match, nothing is written and False is returned.
        """
        wanted, names = fields_to_write(fields)
        cols = [column_of(name) for name in names]
        where, params = ["token = ?"], [task.id]
        for name, value in (expect or {}).items():
            col = column_of(fields_to_write([name])[1][0])
            if value is None:
                where.append(f"{col} IS NULL")
            else:
                where.append(f"{col} = ?")
                params.append(TaskStatus(value).value if col == "status" else value)
        condition = " AND ".join(where)
        with self._transaction() as conn:
            if cols:
                sets = ", ".join(f"{c} = ?" for c in cols)
                cur = conn.execute(
                    f"UPDATE tasks SET {sets} WHERE {condition}",
                    [to_db(c, task) for c in cols] + params,
                )
                changed = cur.rowcount > 0
            else:
                found = conn.execute(f"SELECT 1 FROM tasks WHERE {condition}", params)
                changed = found.fetchone() is not None
            if changed and "read_offsets" in wanted:
                conn.execute("DELETE FROM read_offsets WHERE token = ?", (task.id,))
                self._write_offsets(conn, task)
            return changed

    @_guarded
    def delete(self, token: str) -> bool:
        with self._transaction() as conn:
            cur = conn.execute("DELETE FROM tasks WHERE token = ?", (token,))
            conn.execute("DELETE FROM read_offsets WHERE token = ?", (token,))
            return cur.rowcount > 0

    @_guarded
    def purge(self, now: float, retention: Any) -> list[str]:
        """Delete finished tasks past retention (see `base.purgeable`); their tokens."""
        completed, failed = retention_pair(retention)
        sql = """
            SELECT token FROM tasks
            WHERE status = ? AND coalesce(ended_at, created_at) < ?
              AND (result_read = 1 OR coalesce(ended_at, created_at) < ?)
        """
        with self._transaction() as conn:
            tokens: list[str] = []
            for st, keep in (
                (TaskStatus.COMPLETED, completed),
                (TaskStatus.FAILED, failed),
                (TaskStatus.CANCELLED, failed),
            ):
                rows = conn.execute(sql, (st.value, now - keep, now - 2 * keep)).fetchall()
                tokens.extend(r[0] for r in rows)
            for start in range(0, len(tokens), 500):  # stay under SQLite's variable limit
                chunk = tokens[start : start + 500]
                marks = ", ".join("?" * len(chunk))
                conn.execute(f"DELETE FROM tasks WHERE token IN ({marks})", chunk)
                conn.execute(f"DELETE FROM read_offsets WHERE token IN ({marks})", chunk)
            return tokens

    def _flag(self, token: str, column: str) -> bool:
        assert self._conn is not None
        cur = self._conn.execute(f"UPDATE tasks SET {column} = 1 WHERE token = ?", (token,))
        return cur.rowcount > 0

    @_guarded
    def mark_read(self, token: str) -> bool:
        return self._flag(token, "result_read")

    @_guarded
    def mark_delivered(self, token: str) -> bool:
        """The call's result is in the chat: after a crash it is adopted, never run again."""
        return self._flag(token, "delivered")

    @_guarded
    def set_read_offset(self, token: str, chat: str, offset: int) -> None:
        assert self._conn is not None
        self._conn.execute(_OFFSET, (token, chat, int(offset)))

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
        return self._one(f"{_SELECT} WHERE token = ?", (token,))

    @_guarded
    def find_by_call(self, chat: str, call_id: str) -> Task | None:
        """The newest task started by call `call_id` of `chat`, if any (indexed)."""
        sql = f"{_SELECT} WHERE chat = ? AND call_id = ? ORDER BY created_at DESC, seq DESC"
        return self._one(sql + " LIMIT 1", (chat, call_id))

    def _one(self, sql: str, params: tuple[Any, ...]) -> Task | None:
        assert self._conn is not None
        row = self._conn.execute(sql, params).fetchone()
        if row is None:
            return None
        task = from_row(row)
        self._attach_offsets([task])
        return task

    def _attach_offsets(self, tasks: list[Task]) -> None:
        assert self._conn is not None
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
        sql = f"SELECT {', '.join(COLUMNS)}, seq FROM tasks"
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
    def list(self, query: TaskQuery, limit: int | None = 100, offset: int = 0) -> list[Task]:
        """Tasks newest first (by `created_at`, then insertion order).

        Every query walks an index in order and stops after `offset + limit`
        rows, so a page costs the same with 100 or 100,000 stored tasks.
        Several statuses, or an owner with chats, are answered by merging one
        indexed query per (status, owner or chat).
        """
        scopes = _scopes(query.owner, query.chats)
        status_list: list[str | None] = sorted(query.statuses) if query.statuses else [None]
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
        tasks = [from_row(r[:-1]) for r in rows]
        if tasks:
            self._attach_offsets(tasks)
        return tasks

    @_guarded
    def count(self, query: TaskQuery) -> int:
        assert self._conn is not None
        where, params, scope = [], [], []
        if query.owner is not None:
            scope.append("owner = ?")
            params.append(query.owner)
        chat_list = sorted(query.chats)
        if chat_list:
            scope.append(f"chat IN ({', '.join('?' * len(chat_list))})")
            params.extend(chat_list)
        if scope:
            where.append("(" + " OR ".join(scope) + ")")
        if query.statuses is not None:
            where.append(f"status IN ({', '.join('?' * len(query.statuses))})")
            params.extend(sorted(query.statuses))
        sql = "SELECT count(*) FROM tasks" + (" WHERE " + " AND ".join(where) if where else "")
        return int(self._conn.execute(sql, params).fetchone()[0])

    @_guarded
    def explain(self, sql: str, params: Iterable[Any] = ()) -> str:
        """The query plan of `sql` (diagnostics and tests)."""
        assert self._conn is not None
        rows = self._conn.execute(f"EXPLAIN QUERY PLAN {sql}", list(params))
        return "\n".join(str(r[-1]) for r in rows)

    def explain_list(self, query: TaskQuery) -> str:
        """The query plan `list()` uses for `query`'s owner and first status."""
        status = sorted(query.statuses)[0] if query.statuses else None
        scope = None if query.owner is None else ("owner", query.owner)
        where, params = _where(scope, status)
        sql = f"{_SELECT}{' WHERE ' + ' AND '.join(where) if where else ''}"
        return self.explain(sql + " ORDER BY created_at DESC, seq DESC LIMIT 50", params)

    def pragma(self, name: str) -> Any:
        """The value of `PRAGMA name` on this connection (diagnostics and tests)."""
        with self._lock:
            assert self._conn is not None
            return self._conn.execute(f"PRAGMA {name}").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


__all__ = ["DEFAULT_BUSY_TIMEOUT", "NewerSchema", "SqliteStore"]
