"""The filter's matcher processes (tasks/output_filter.py): a bounded number at once."""

from __future__ import annotations

import asyncio
import re

from sidekick_tools.tasks import output_filter


async def test_a_flood_of_filters_runs_a_few_matchers_at_a_time(monkeypatch):
    """Two hundred filtered reads at once started two hundred matcher processes,
    each free to spend its time limit on a core (an MCP client's hostile
    patterns held `ping` 20 s on two cores). At most MATCHERS run at once; every
    read is answered."""
    running, most = 0, 0

    async def matcher(*_args, **_kw):
        nonlocal running, most
        running += 1
        most = max(most, running)
        return Process()

    class Process:
        returncode = None

        async def communicate(self, _job):
            nonlocal running
            await asyncio.sleep(0.01)
            running -= 1
            self.returncode = 0
            return b'{"hits": [0], "cut": false}', b""

        async def wait(self):
            return 0

    monkeypatch.setattr(output_filter.asyncio, "create_subprocess_exec", matcher)
    rx = re.compile("a")
    reads = [output_filter.matching_lines(["a", "b"], rx, 100, 5.0) for _ in range(40)]
    answers = await asyncio.gather(*reads)
    assert answers == [(["a"], False)] * 40
    assert most == output_filter.MATCHERS


async def test_the_real_matcher_answers():
    lines = ["error: one", "fine", "error: two"]
    assert await output_filter.matching_lines(lines, re.compile("^error"), 100, 10.0) == (
        ["error: one", "error: two"],
        False,
    )
