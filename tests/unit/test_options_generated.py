"""What is generated from the one declaration of every option (config.lua's
M.options) is in sync with it: the Python defaults and the help's option list."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests import nvims

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_options.lua"


def check(script: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [nvims.default(), "--clean", "-l", str(script), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_generated_files_match_the_declaration():
    run = check(SCRIPT)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_check_sees_a_stale_file(tmp_path):
    """A copy of the tree whose defaults.json lost an option fails the check."""
    for rel in ("scripts", "lua", "doc"):
        subprocess.run(["cp", "-r", str(ROOT / rel), str(tmp_path / rel)], check=True)
    package = tmp_path / "rplugin" / "python3" / "sidekick_tools"
    package.mkdir(parents=True)
    fresh = (ROOT / "rplugin" / "python3" / "sidekick_tools" / "defaults.json").read_text()
    (package / "defaults.json").write_text(fresh.replace('    "tasks.nice": 10,\n', ""))
    run = subprocess.run(
        [
            nvims.default(),
            "--clean",
            "-l",
            str(tmp_path / "scripts" / "gen_options.lua"),
            "--check",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 1
    assert "stale: " + str(package / "defaults.json") in run.stdout
    assert "sidekick_tools.txt" not in run.stdout  # the help was in sync


def test_the_tools_setup_checks_auto_accept_tools_against_are_the_hosts():
    from sidekick_tools.tools import REGISTRY

    lua = ROOT / "lua" / "sidekick_tools" / "constants.lua"
    listed = re.search(r"M\.tools = \{([^}]*)\}", lua.read_text()).group(1)
    assert sorted(re.findall(r'"(\w+)"', listed)) == sorted(REGISTRY)
