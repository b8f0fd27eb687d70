"""``python -m tests.fake_provider [--host H] [--port 0] [--script FILE] [--repeat] [--api-key K]``

Prints the base URL (``http://127.0.0.1:PORT``; OpenAI clients add ``/v1``) on the
first line of stdout, then serves until SIGINT/SIGTERM or stdin closes (with
``--until-stdin-closes``), so a parent process can own its lifetime.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from .script import load_script
from .server import FakeProvider

SCRIPT_HELP = """\
script (--script FILE): a JSON list, one item per request, in order:
  "Hello"                                  a text reply
  {"pieces": [{"thinking": "..."},         a reply made of pieces: thinking,
     "Let me look.",                         text, tool_call (optional "id"),
     {"tool_call": {"name": "list_directory", "input": {"path": "."}}}],
   "chunk": 4, "tokens_per_second": 20}      stream_error; pacing and the other
                                             Reply options of script.py
  {"error": {"status": 429, "retry_after": 1, "message": "slow down"}}
                                           an HTTP error

use it from Neovim (the URL is the first line this prints):
  require("sidekick_tools").setup({ chat = { model = "fake/any-name",
    providers = { fake = { kind = "anthropic", base_url = "http://127.0.0.1:PORT" } } } })
  (kind = "openai": base_url = "http://127.0.0.1:PORT/v1"; no api_key is needed)
"""


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.fake_provider",
        description="A loopback model server speaking the Anthropic Messages and OpenAI "
        "Chat Completions protocols (/v1), replaying a script: one reply per request.",
        epilog=SCRIPT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--script", help="JSON file: a list of replies (see script.py)")
    parser.add_argument("--repeat", action="store_true", help="replay the script forever")
    parser.add_argument("--api-key", help="refuse requests without this key (401)")
    parser.add_argument("--until-stdin-closes", action="store_true")
    args = parser.parse_args(argv)
    script = load_script(args.script) if args.script else []
    fake = FakeProvider(
        script, api_key=args.api_key, host=args.host, port=args.port, repeat=args.repeat
    )
    await fake.start()
    print(fake.base_url, flush=True)
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, done.set)
    if args.until_stdin_closes:
        loop.add_reader(sys.stdin.fileno(), lambda: sys.stdin.buffer.read1(65536) or done.set())
    await done.wait()
    await fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
