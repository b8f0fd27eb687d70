"""Why a task store cannot do what it was asked."""

from __future__ import annotations


class StoreError(RuntimeError):
    """The store cannot be used; the message names the file and what to do."""


class StoreBusy(StoreError):
    """Another program holds the database's lock: try again later."""


class DuplicateToken(StoreError):
    """`insert()` of a task whose explicit id is already stored."""
