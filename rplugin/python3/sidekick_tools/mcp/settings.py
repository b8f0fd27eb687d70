"""Where the MCP server keeps its state and how it reads the user's settings.

The server runs without Neovim, so the plugin's ``setup()`` writes the
settings the server needs (agents, task limits, the ``mcp`` options; never an
API key) to ``<state_dir>/mcp.json`` (0600), and the server reads that file,
or the one given with ``--config FILE``. The file is read again when it
changes, so new agents reach a running server without a restart.

State directory, first found: ``--state-dir``, ``$SIDEKICK_TOOLS_STATE_DIR``,
``state_dir`` in an explicit ``--config`` file, then Neovim's default
(``stdpath("state")/sidekick_tools``, see `config.default_state_dir`).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
from dataclasses import dataclass
from typing import Any

from ..config import Config, default_state_dir

log = logging.getLogger(__name__)

CONFIG_NAME = "mcp.json"
STATE_ENV = "SIDEKICK_TOOLS_STATE_DIR"
MAX_CONFIG_BYTES = 1 << 20


class SettingsError(Exception):
    """The settings cannot be used; the message says what to fix."""


@dataclass
class Options:
    state_dir: str
    config_path: str
    config_required: bool  # given with --config: a missing file is an error


def parse_args(argv: list[str], environ: dict[str, str] | None = None) -> Options:
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="python -m sidekick_tools.mcp",
        description="sidekick-tools MCP server over stdio: the plugin's task engine for agents.",
    )
    parser.add_argument("--state-dir", help="task store and logs (default: Neovim's)")
    parser.add_argument("--config", help=f"settings file (default: <state-dir>/{CONFIG_NAME})")
    args = parser.parse_args(argv)
    state_dir = args.state_dir or env.get(STATE_ENV) or ""
    if args.config:
        path = os.path.abspath(os.path.expanduser(args.config))
        if not state_dir:
            state_dir = str(_read(path, required=True).get("state_dir") or "")
    else:
        path = ""
    state_dir = os.path.abspath(os.path.expanduser(state_dir or default_state_dir()))
    return Options(state_dir, path or os.path.join(state_dir, CONFIG_NAME), bool(path))


def _read(path: str, required: bool) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        if required:
            raise SettingsError(f"settings file {path} does not exist") from None
        return {}
    except OSError as e:
        raise SettingsError(f"cannot read settings file {path}: {e.strerror or e}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise SettingsError(f"settings file {path} is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SettingsError(f"settings file {path} is not valid JSON: {e}") from None
    if not isinstance(raw, dict):
        raise SettingsError(f"settings file {path} must hold a JSON object")
    return raw


def load(path: str, state_dir: str, required: bool = False) -> Config:
    """The configuration in ``path`` (defaults for what it lacks), for the state dir
    in use, with the waits bounded for MCP clients (`for_mcp`)."""
    raw = _read(path, required)
    raw["state_dir"] = state_dir
    try:
        return for_mcp(Config.from_dict(raw))
    except (TypeError, ValueError) as e:  # a number that is none ("abc"), say
        raise SettingsError(f"settings file {path}: {e}") from None


def for_mcp(config: Config) -> Config:
    """A copy whose waits fit MCP clients: one `await` lasts at most
    ``mcp.await_timeout`` seconds, and so does the hybrid wait of `run`/`ask`."""
    out = copy.deepcopy(config)
    cap = max(0.0, float(out.mcp.await_timeout))
    out.tasks.await_timeout = cap
    out.tasks.hybrid_threshold = min(max(0.0, float(out.tasks.hybrid_threshold)), cap)
    return out


class ConfigSource:
    """The configuration, read again whenever its file changes."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self._stamp = self._stat()
        self._config = load(options.config_path, options.state_dir, options.config_required)

    def _stat(self) -> tuple[float, int] | None:
        try:
            st = os.stat(self.options.config_path)
        except OSError:
            return None
        return (st.st_mtime, st.st_size)

    def current(self) -> Config:
        stamp = self._stat()
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self._config = load(self.options.config_path, self.options.state_dir)
            except SettingsError as e:  # keep serving with the settings we had
                log.warning("%s; keeping the previous settings", e)
        return self._config
