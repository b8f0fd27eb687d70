"""`make demo`: the chat loop, offline, against a scripted model.

The "model" is the plugin's fake provider (tests/fake_provider/, loaded by path:
the demo needs nothing of the test suite) serving on 127.0.0.1 as provider
`demo`, model `demo/scripted`: it streams the replies scripted below, in the
Anthropic wire protocol, with no network and no API key. The chat says so in its
front matter.

The walk-through: the user's question is sent; the first reply streams in with
two safe calls (list_directory, read_files) that run by themselves, and their
results go back; the second reply asks to run `python3 hello.py --count 3`,
which waits for the user's consent (▶); once it is run (or denied) the result
goes back and the last reply streams a final answer that follows what happened.

`make demo` opens Neovim on the chat in a temporary directory, removed when
Neovim exits; the winbar says which keys to press. `make demo HEADLESS=1` walks
the same way without a UI, as a user would (send, wait for the loop, run the
call that needs consent through the Lua API, wait), and prints the chat.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
HELLO = '''"""A tiny script for the demo."""
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--count", type=int, default=1)
args = parser.parse_args()
for i in range(args.count):
    print(f"hello #{i + 1}")
'''
RUN_ID = "toolu_demo_run"
PACE = {"chunk": 4, "tokens_per_second": 60}  # fast enough to wait for, slow enough to see
SCRIPTED = (
    "(A scripted reply: this demo's model replays examples/demo.py. For a real one, "
    "configure a provider as the README shows.)"
)


def fake_provider() -> ModuleType:
    """tests/fake_provider as a package of its own name: only the standard library."""
    init = ROOT / "tests" / "fake_provider" / "__init__.py"
    spec = importlib.util.spec_from_file_location(
        "sidekick_demo_fake_provider", init, submodule_search_locations=[str(init.parent)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def script(fp: ModuleType) -> list[Any]:
    """The scripted model's replies, one per request."""
    reply, tool_call = fp.reply, fp.tool_call

    def final_answer(body: dict[str, Any]) -> Any:
        # the last request carries the command's result: answer what happened
        content = body["messages"][-1]["content"]
        blocks = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        said = json.dumps(blocks)
        if "status=completed" in said:
            answer = (
                "It runs. The project is one script, `hello.py`: it prints numbered "
                "greetings, as many as `--count` says (one by default). With `--count 3` "
                "it printed `hello #1` to `hello #3` and exited with 0."
            )
        elif "status=denied" in said:
            answer = (
                "You chose not to run it, so I cannot say whether it runs. From its source: "
                "`hello.py` prints numbered greetings, as many as `--count` says."
            )
        else:
            answer = (
                "The script did not run cleanly: its result block above says why. It is "
                "meant to print numbered greetings, as many as `--count` says."
            )
        return reply(f"{answer}\n\n{SCRIPTED}", **PACE)

    the_end = reply(
        "That is all this scripted model knows: the demo's conversation is over. "
        "Quit with :qa, or set up a real provider (see the README).",
        **PACE,
    )
    return [
        reply(
            "I'll look around the project first.",
            tool_call("list_directory", {"path": "."}, id="toolu_demo_ls"),
            tool_call("read_files", {"paths": ["hello.py"]}, id="toolu_demo_read"),
            **PACE,
        ),
        reply(
            "There is one script, `hello.py`: it reads `--count` and prints a numbered "
            "greeting that many times. Let me run it to check that it works.",
            tool_call(
                "run_terminal_command",
                {"command": "python3 hello.py --count 3", "purpose": "Check that the script runs"},
                id=RUN_ID,
            ),
            **PACE,
        ),
        final_answer,
        *[the_end] * 20,
    ]


def prepare(url: str) -> tuple[Path, Path, dict[str, str]]:
    base = Path(tempfile.mkdtemp(prefix="sidekick-demo-"))
    work = base / "project"
    work.mkdir()
    (work / "hello.py").write_text(HELLO)
    chat = work / "demo.sidekick.md"
    shutil.copy(ROOT / "examples" / "demo.sidekick.md", chat)
    env = dict(os.environ)
    env.update(
        SIDEKICK_ROOT=str(ROOT),
        SIDEKICK_PYTHON=sys.executable,
        SIDEKICK_STATE_DIR=str(base / "state"),
        SIDEKICK_DEMO_URL=url,
    )
    return work, chat, env


def nvim_binary() -> str:
    local = Path(sys.executable).parent / "nvim"
    return str(local) if local.exists() else (shutil.which("nvim") or "nvim")


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit(f"demo: timed out waiting for {what}")


# What the headless walk-through reads back from Neovim, as a user would see it.
DIAGNOSTICS = """
local ns = vim.api.nvim_create_namespace('sidekick_tools')
return vim.tbl_map(function(d) return {d.lnum, d.message} end,
  vim.diagnostic.get(0, { namespace = ns }))
"""
USAGE = """
local ns = vim.api.nvim_create_namespace('sidekick_tools_usage')
return vim.tbl_map(function(m) return {m[2], m[4].virt_text[1][1]} end,
  vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, { details = true }))
"""


def headless(fake: Any, work: Path, chat: Path, env: dict[str, str]) -> int:
    import pynvim

    os.environ.update(env)
    os.chdir(work)
    argv = [nvim_binary(), "--embed", "--headless", "--clean", "-n", "-u"]
    argv.append(str(ROOT / "examples" / "demo_init.lua"))
    nvim = pynvim.attach("child", argv=argv)
    try:
        nvim.command(f"edit {chat}")
        lines = lambda: nvim.current.buffer[:]  # noqa: E731
        diagnostics = lambda: nvim.exec_lua(DIAGNOSTICS)  # noqa: E731
        nvim.exec_lua("return require('sidekick_tools').send()")
        # The loop runs list_directory and read_files by itself and sends their
        # results; the second reply's command needs consent: it waits with ▶.
        header = f"```tool run_terminal_command id={RUN_ID}"

        def pending_row() -> int | None:
            rows = lines()
            if header not in rows:
                return None
            row = rows.index(header)
            return row if [row, "▶"] in [[r, m[:1]] for r, m in diagnostics()] else None

        row = wait_for(lambda: pending_row(), "the call that needs consent")
        nvim.exec_lua("return require('sidekick_tools').run_tool(0, ...)", row + 1)
        # its result goes back by itself; the final answer streams in
        wait_for(
            lambda: len(fake.requests) >= 3 and len(nvim.exec_lua(USAGE)) >= 3,
            "the final answer",
        )
        wait_for(lambda: lines()[-1] == "USER: ", "the chat to be ready for the user")
        # state changes are drawn at most every 50 ms: wait for the last draw
        diags = wait_for(
            lambda: (d := diagnostics()) and len(d) == 3 and all("✓" in m for _, m in d) and d,
            "every call's final state",
        )
        print("\n".join(lines()))
        print("\n-- diagnostics --")
        print("\n".join(f"{r + 1}: {m}" for r, m in sorted(diags)))
        print("\n-- usage (virtual text on each ASSISTANT: line) --")
        print("\n".join(f"{r + 1}: {text}" for r, text in sorted(nvim.exec_lua(USAGE))))
    finally:
        try:
            nvim.command("qall!")
        except Exception:
            pass
        shutil.rmtree(work.parent, ignore_errors=True)
    return 0


def main() -> int:
    fp = fake_provider()
    with fp.ThreadedFakeProvider(script(fp)) as fake:
        work, chat, env = prepare(fake.anthropic_url)
        if os.environ.get("HEADLESS"):
            return headless(fake, work, chat, env)
        print(f"demo chat: {chat}")
        print(f"demo model: a script served on {fake.base_url} (no network, no API key)")
        argv = [nvim_binary(), "--clean", "-u", str(ROOT / "examples" / "demo_init.lua")]
        try:
            return subprocess.call([*argv, str(chat)], cwd=work, env=env)
        finally:
            shutil.rmtree(work.parent, ignore_errors=True)
            print(f"demo: removed {work.parent}")


if __name__ == "__main__":
    sys.exit(main())
