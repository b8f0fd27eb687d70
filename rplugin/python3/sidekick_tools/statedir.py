"""The state directory (0700) and the log file in it (0600), shared by the
Neovim host and the MCP server."""

from __future__ import annotations

import logging
import os


def prepare_state_dir(path: str) -> None:
    os.makedirs(path, mode=0o700, exist_ok=True)
    try:
        os.chmod(path, 0o700)
    except OSError:
        pass


def log_to_file(path: str) -> None:
    """Send the package's log records to ``path`` (once per process)."""
    root = logging.getLogger("sidekick_tools")
    if any(isinstance(h, logging.FileHandler) for h in root.handlers):
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.close(fd)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(os.environ.get("SIDEKICK_TOOLS_LOG_LEVEL", "INFO"))
