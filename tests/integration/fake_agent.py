"""A fake agent CLI for the use_agent tests: ``python fake_agent.py --mode MODE [opts] MESSAGE``.

Modes:
  summary   a transcript with ANSI colours, ``[PROGRESS:NN]`` markers and ``> ``
            prompts, then a ``[RESULT]`` section naming the message; exit 0
  prompt    a transcript whose answer follows the last ``> `` prompt line (no [RESULT])
  kiro      chatter, then ``> `` and a one-line answer on the same line
  plain     a few plain lines only (the summary is the tail)
  echo      prints the message exactly, between ``<<`` and ``>>``, and each argv item
  wait      prints a batch of lines, then for each ``--release PATH`` waits until
            that file exists and prints the next batch; then a [RESULT]; exit 0
  fail      some output, an error on stderr, exit 2
  stubborn  ignores SIGTERM, prints "ready", then waits for ``--release`` (or forever)
  silent    prints nothing; exit 0

Waiting is polling for a file the test creates, never a fixed delay.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

RED = "\x1b[31m"
GREEN = "\x1b[1;32m"
RESET = "\x1b[0m"


def say(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def wait_file(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.02)


def batch(n: int) -> None:
    say(f"[PROGRESS:{min(99, 10 + 30 * n)}] batch {n}")
    for k in range(3):
        say(f"batch {n} line {k}")
    say(f"{RED}error: problem in batch {n}{RESET}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="summary")
    parser.add_argument("--release", action="append", default=[])
    parser.add_argument("message", nargs="?", default="")
    args, rest = parser.parse_known_args()
    message = args.message
    mode = args.mode

    if mode == "summary":
        say(f"{GREEN}fake agent 1.0{RESET}")
        say(f"> {message}")
        say("[PROGRESS:20] reading files")
        say(f"thinking about {RED}the problem{RESET}")
        say("[PROGRESS:80] writing answer")
        say("> follow-up prompt")
        say("more transcript")
        say(f"[RESULT] {GREEN}Done:{RESET} handled {message!r}")
        say("all good")
        return 0
    if mode == "prompt":
        say("transcript line 1")
        say("> first question")
        say("first answer")
        say(f"> {message}")
        say(f"{GREEN}final answer{RESET} for {message}")
        return 0
    if mode == "kiro":
        say("loading tools... done")
        say("thinking")
        say(f"> {GREEN}the answer to {message}{RESET} on the prompt's own line")
        return 0
    if mode == "plain":
        for i in range(5):
            say(f"plain line {i}")
        return 0
    if mode == "echo":
        say("<<" + message + ">>")
        say("argv=" + repr(sys.argv[1:]))
        say("agent=" + os.environ.get("SIDEKICK_AGENT", "") + " extra=" + os.environ.get("X", ""))
        say("cwd=" + os.getcwd())
        return 0
    if mode == "wait":
        batch(0)
        for i, path in enumerate(args.release, start=1):
            wait_file(path)
            batch(i)
        say(f"[RESULT] finished {message}")
        return 0
    if mode == "fail":
        say("starting")
        say("[PROGRESS:50] half way")
        sys.stderr.write("fatal: the fake agent failed\n")
        say("[RESULT] could not do it")
        return 2
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        say("ready")
        if args.release:
            wait_file(args.release[0])
            return 0
        while True:
            time.sleep(1)
    if mode == "silent":
        return 0
    sys.stderr.write(f"unknown mode {mode}\n")
    return 64


if __name__ == "__main__":
    sys.exit(main())
