"""What the parts of the calls layer share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import Config
from .registry import CallRegistry


@dataclass
class CallContext:
    """The editor (``port``), the calls this host follows, the task engine and the
    settings. One object for every part, so a ``setup()`` that changes the
    settings changes them here, once, for all of them."""

    port: Any
    registry: CallRegistry
    tasks: Any
    config: Config
