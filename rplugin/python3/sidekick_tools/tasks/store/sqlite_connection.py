"""The task database's connection: the file opened (private, WAL, its schema
brought up to date), one write transaction at a time, and sqlite's errors
turned into `StoreBusy` (another program's lock) or `StoreError`."""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import stat
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import StoreBusy, StoreError
from .schema import bring_up_to_date, check_version

if TYPE_CHECKING:
    from .sqlite import SqliteStore

DEFAULT_BUSY_TIMEOUT = 0.05  # seconds an operation waits for another program's lock


def is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def connect(path: str, busy_timeout: float) -> sqlite3.Connection:
    """The open database at `path` (an absolute path), created 0600 in a 0700
    directory when missing. A file locked by another program raises `StoreBusy`;
    one that cannot be used (a newer schema, not a database) `StoreError`."""
    conn: sqlite3.Connection | None = None
    try:
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            os.makedirs(parent, mode=0o700, exist_ok=True)
            os.chmod(parent, 0o700)
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        conn = sqlite3.connect(
            path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
        )
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        check_version(conn)  # read only: a newer file is left as it is
        st = os.stat(path)
        if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) != 0o600:
            os.chmod(path, 0o600)
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"cannot switch to WAL journal (got {mode!r})")
        conn.execute("PRAGMA synchronous = NORMAL")
        with transaction(conn):
            bring_up_to_date(conn)
        return conn
    except (sqlite3.Error, OSError, ValueError) as exc:
        if conn is not None:
            conn.close()
        if isinstance(exc, sqlite3.Error) and is_busy(exc):
            raise StoreBusy(
                f"cannot use task database {path}: it is locked by another program ({exc})"
            ) from exc
        raise StoreError(
            f"cannot use task database {path}: {exc}. Move the file aside (or "
            f"delete it) to start a new task history; until then tasks are kept in "
            f"memory only and are lost when Neovim exits."
        ) from exc


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction (`BEGIN IMMEDIATE`): committed, or rolled back on error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


_T = TypeVar("_T")


def guarded(method: Callable[..., _T]) -> Callable[..., _T]:
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
                if is_busy(exc):
                    raise StoreBusy(
                        f"task database {self.path} is locked by another program ({exc})"
                    ) from exc
                raise StoreError(f"task database {self.path}: {exc}") from exc

    return wrapper
