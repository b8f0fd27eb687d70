"""What :SidekickInstall asks pip for, read from pyproject.toml: the core
dependencies, and on Python 3.10+ the `chat` and `mcp` extras (lua/sidekick_tools/
install.lua names the same specs; tests/integration/test_host.py checks that).

`python tests/install_specs.py` prints them for `make setup`, which downloads
their wheels into .venv/wheelhouse: the install test then runs pip against that
folder only (PIP_NO_INDEX), so the suite stays on loopback."""

from __future__ import annotations

import re
import sys
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _specs(line_pattern: str) -> list[str]:
    text = PYPROJECT.read_text()
    line = re.search(line_pattern, text, re.M)
    assert line, line_pattern
    return [spec.split(";")[0].strip() for spec in re.findall(r'"([^"]+)"', line.group(1))]


def core() -> list[str]:
    """pyproject.toml's `dependencies`, without markers."""
    return _specs(r"^dependencies = \[(.*)\]$")


def extra(name: str) -> list[str]:
    """The requirement strings of pyproject.toml's extra `name`, without markers."""
    return _specs(rf"^{name} = \[(.*)\]$")


def for_python(version: tuple[int, int]) -> list[str]:
    """What :SidekickInstall installs into a venv of Python `version`."""
    return core() + (extra("chat") + extra("mcp") if version >= (3, 10) else [])


if __name__ == "__main__":
    print("\n".join(for_python(sys.version_info[:2])))
