"""What a host imports when it starts: the cold first command (DESIGN §9) is
mostly Python importing, so the chat loop's modules wait for the first send."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "rplugin" / "python3"

# imported by the first send (calls/loop.py) or tools.specs(), never at start-up
CHAT_LOOP_ONLY = (
    "sidekick_tools.calls.outbound",
    "sidekick_tools.calls.reply_stream",
    "sidekick_tools.chat.blocks",
    "sidekick_tools.chat.reply",
    "sidekick_tools.chat.reply_render",
    "sidekick_tools.chat.conversation",
    "sidekick_tools.llm",
)


def modules_after(statement: str) -> set[str]:
    """The sidekick_tools modules a fresh interpreter holds after ``statement``."""
    code = (
        f"import json, sys; sys.path.insert(0, {str(PACKAGE_DIR)!r}); {statement}; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('sidekick_tools'))))"
    )
    done = subprocess.run(
        [sys.executable, "-E", "-c", code], capture_output=True, text=True, check=True
    )
    return set(json.loads(done.stdout))


def test_a_starting_host_imports_none_of_the_chat_loop():
    loaded = modules_after("import sidekick_tools.host")
    assert "sidekick_tools.calls.loop" in loaded  # the check sees the calls layer
    assert "sidekick_tools.tasks.manager" in loaded
    assert not loaded & set(CHAT_LOOP_ONLY), loaded & set(CHAT_LOOP_ONLY)


def test_the_tools_schemas_for_a_send_bring_the_block_model():
    loaded = modules_after(
        "import sidekick_tools.host; from sidekick_tools import tools; "
        "from sidekick_tools.config import Config; tools.specs(Config.from_dict({}))"
    )
    assert "sidekick_tools.chat.blocks" in loaded
