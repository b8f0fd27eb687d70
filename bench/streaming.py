"""The streaming rows of DESIGN §9: a reply streamed into a 100,000-line chat.

Each figure is measured for the plugin (`require("sidekick_tools").send()`; the
host reads the stream and sends coalesced edits) and, in the same run, for the
Lua baseline of bench/lua/sidekick_bench_stream.lua (the chat read in Lua,
`curl -N` under `jobstart`, one `nvim_buf_set_text` per SSE text delta, the way
most Neovim chat plugins stream). Each side has an editor of its own holding the
same chat; both talk to one fake provider (tests/fake_provider) on loopback,
Anthropic protocol, that runs in a thread of the bench.

- Round-trips (`nvim_get_mode` from the prober process, as in the flood rows)
  while a reply streams at `--stream-rate` tokens/s (one 4-character delta per
  token), against the same editor idle just before the send.
- A delta's way from the wire into the buffer: as the fake writes every 20th
  delta it puts its monotonic clock into the text; a Lua `on_lines` watcher reads
  the clock when that text enters the buffer (both clocks are CLOCK_MONOTONIC).
- `send` → the request's first line at the fake.
- The editor's memory growth (VmRSS, sampled by the prober) over a
  `--reply-mb` reply sent as fast as loopback carries it, in fresh editors.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

import chats
from measure import med, pct, rtt_figures, trio, wait_quiet
from nvimctl import Editor, wait_until

STAMP = "T@"  # the fake writes its clock (µs) here as it sends the delta
DONE = "<<reply done>>"
MODEL = "bench/fake"
WORDS = ("one ", "two ", "six ", "ten ", "red ", "sun ", "sky ", "day ", "sea ", "map ")
SIDES = ("ours", "curl")
# Each measure starts once the editor and the host have used no CPU for this
# long: longer than the host's rescan of a changed chat (calls/scan.py, 0.15 s),
# which a user's question in a 100,000-line chat sets off.
QUIET = 0.5


def reply_text(units: int) -> str:
    """`units` pieces of 4 characters, 20 to a line with a stamp "[T@]" in the
    middle of each, then DONE; with `chunk=4` each piece is one delta."""
    out = []
    for i in range(units):
        col = i % 20
        if col == 19:
            out.append("end\n")
        elif col == 10:
            out.append(f"[{STAMP}]")
        else:
            out.append(WORDS[(i * 7 + i // 20) % len(WORDS)])
    return "".join(out) + DONE


class Side:
    """An editor holding the chat: the plugin's (with its host) or the baseline's."""

    def __init__(self, tmp: Any, kind: str, fake: Any, chat: str) -> None:
        self.kind, self.fake = kind, fake
        self.ed = Editor(tmp, plugin=kind == "ours")
        self.host: int | None = None
        self.replies = 0
        self.body_bytes = 0  # the size of its last request
        try:
            if kind == "ours":
                provider = {"kind": "anthropic", "base_url": fake.anthropic_url}
                self.ed.setup(chat={"model": MODEL, "providers": {"bench": provider}})
                self.host = self.ed.start_host()
            self.buf = self.ed.open_chat(chat)
            self.lines = int(self.ed.lua("return vim.api.nvim_buf_line_count(0)"))
        except Exception:
            self.ed.close()
            raise

    @property
    def pids(self) -> list[int]:
        return [self.ed.pid] + ([self.host] if self.host else [])

    def lua(self, fn: str, *args: Any) -> Any:
        return self.ed.lua(f"return require('sidekick_bench_stream').{fn}(...)", *args)

    def send(self) -> int:
        """Send the chat; returns the clock (hrtime, ns) Lua read just before."""
        if self.kind == "ours":
            res = self.lua("plugin_send")
            if not res["ok"]:
                raise RuntimeError(f"bench: send failed: {res['err']}; {self.ed.notes()}")
            return int(res["t0"])
        return int(self.lua("curl_send", self.buf, self.fake.anthropic_url, MODEL))

    def wait_reply(self, timeout: float) -> None:
        """Until the reply has ended and the chat is ready for the next question."""
        self.replies += 1
        if self.kind == "ours":
            wait_until(lambda: self.lua("replies_done") >= self.replies, timeout, 0.1, "reply")
            last = "return vim.api.nvim_buf_get_lines(0, -2, -1, false)[1]"
            wait_until(lambda: self.ed.lua(last) == "USER: ", timeout, 0.05, "the loop's end")
        else:
            wait_until(lambda: self.lua("curl_result")["exit"] is not None, timeout, 0.1, "curl")

    def close(self) -> None:
        self.ed.close()


def first_byte(side: Side, question: str) -> float:
    """ms from `send` (Lua's clock) to the request's first line at the fake."""
    from tests.fake_provider import reply

    n = len(side.fake.requests)
    side.fake.push(reply("Noted.", chunk=0))
    side.lua("ask", question)
    wait_quiet(side.pids, QUIET)
    t0 = side.send()
    wait_until(lambda: len(side.fake.requests) > n, 60, 0.05, "the request")
    side.wait_reply(60)
    request = side.fake.requests[n]
    side.body_bytes = len(request.body)
    return request.first_line_at * 1000 - t0 / 1e6


def stream(b: Any, side: Side, units: int, rate: float | None, chunk: int) -> dict[str, Any]:
    """One reply of `units` 4-character pieces (`chunk` characters a delta, `rate`
    deltas a second, None: unpaced) into `side`'s chat, probed from `idle_s`
    before the send until 1 s after its end (what the end costs counts for memory)."""
    from tests.fake_provider import reply

    text = reply_text(units)
    side.fake.push(reply(text, chunk=chunk, tokens_per_second=rate, stamp=STAMP))
    side.lua("ask", f"Write {units} words.")
    side.lua("watch", side.buf, DONE)
    wait_quiet(side.pids, QUIET)
    probe = b.probe(side.ed, side.pids, f"stream-{side.kind}")
    time.sleep(b.a.idle_s)
    t0 = side.send()
    limit = 120 + (units / rate if rate else 0) * 3
    wait_until(lambda: side.lua("watched")["t_end"] is not None, limit, 0.25, "the stream's end")
    time.sleep(1.0)  # memory: what the end of the reply costs is counted too
    data = probe.stop()
    watched = side.lua("watched")
    side.wait_reply(120)
    t_send, t_end = t0 / 1e9, watched["t_end"] / 1e9
    t_first = watched["t_first"] / 1e9 if watched["t_first"] is not None else t_send
    probes = list(zip(data["t"], data["rtt"]))
    rss = data["rss"].get(str(side.ed.pid), [])
    # a probe sent just before the send and held up by it counts for the send,
    # not for the idle editor: the probes are split by when they were answered
    out = {
        "idle_rtt": [r for t, r in probes if t + r / 1000 < t_send],
        "busy_rtt": [r for t, r in probes if t_first <= t <= t_end],
        "send_rtt": [r for t, r in probes if t < t_first and t + r / 1000 >= t_send],
        "lat": watched["lat"],
        "stream_s": t_end - t_first,
        "rate": units / (t_end - t_first) if t_end > t_first else float("nan"),
        "edits": watched["edits"],
        "rss_growth_mb": _growth(rss, t_send),
    }
    if side.host:
        out["host_growth_mb"] = _growth(data["rss"].get(str(side.host), []), t_send)
    return out


def _growth(rss: list[list[float]], t0: float) -> float:
    """MB from the last sample before `t0` to the largest from `t0` on."""
    before = [v for t, v in rss if t < t0]
    base = before[-1] if before else (rss[0][1] if rss else 0)
    return (max([v for t, v in rss if t >= t0] or [base]) - base) / 1024


def run(b: Any) -> None:
    """The four rows, each side beside the other."""
    from tests.fake_provider import ThreadedFakeProvider

    if not shutil.which("curl"):
        raise SystemExit("bench: the streaming rows' Lua baseline needs curl on PATH")
    a = b.a
    units = int(a.stream_rate * a.stream_s)
    mem_units = int(a.reply_mb * 1024 * 1024 / 4)
    b.log(
        f"streaming: {a.chat_lines:,}-line chat; {a.stream_reps} replies of {units} tokens "
        f"at {a.stream_rate:g}/s, {a.send_runs} sends, a {a.reply_mb:g} MB reply, each "
        "side (ours, curl under jobstart)"
    )
    chat = chats.settled_chat(a.chat_lines)
    res: dict[str, dict[str, Any]] = {k: {"streams": [], "sends": [], "mem": None} for k in SIDES}
    with ThreadedFakeProvider() as fake:
        sides = {}
        try:
            for kind in SIDES:
                sides[kind] = Side(b.tmp, kind, fake, chat)
            lines = sides["ours"].lines
            b.raw["stream_body_mb"] = {}
            # the first send of each side is its warm-up (imports, connections)
            for kind, side in sides.items():
                res[kind]["first_send"] = first_byte(side, "A first question.")
            for i in range(a.send_runs):
                for kind, side in sides.items():
                    res[kind]["sends"].append(first_byte(side, f"Question {i}."))
            for kind, side in sides.items():
                b.raw["stream_body_mb"][kind] = side.body_bytes / 1e6
            for _ in range(a.stream_reps):
                for kind, side in sides.items():
                    s = stream(b, side, units, a.stream_rate, 4)
                    res[kind]["streams"].append(s)
                    f = rtt_figures(s["idle_rtt"], s["busy_rtt"])
                    b.log(
                        f"  {kind}: {s['rate']:.0f} tokens/s, round-trip p50/p99/max "
                        f"{f['p50']:.2f}/{f['p99']:.2f}/{f['max']:.2f} ms (idle p99 "
                        f"{f['idle_p99']:.2f}), delta → buffer p99 {pct(s['lat'], 99):.1f} ms"
                    )
        finally:
            for side in sides.values():
                side.close()
        # memory, each side in a fresh editor: nothing from the runs above counts
        for kind in SIDES:
            side = Side(b.tmp, kind, fake, chat)
            try:
                first_byte(side, "A first question.")
                res[kind]["mem"] = stream(b, side, mem_units, None, 16)
            finally:
                side.close()
            grew = res[kind]["mem"]["rss_growth_mb"]
            b.log(f"  {kind}: {a.reply_mb:g} MB reply, editor +{grew:.1f} MB")
    b.raw["streaming"] = res
    rows(b, res, lines, units)


def _pooled(streams: list[dict[str, Any]]) -> dict[str, Any]:
    """One side's paced replies together: percentiles over all their probes and stamps."""
    idle = [r for st in streams for r in st["idle_rtt"]]
    busy = [r for st in streams for r in st["busy_rtt"]]
    sending = [r for st in streams for r in st["send_rtt"]]
    lat = [x for st in streams for x in st["lat"]]
    return {
        **rtt_figures(idle, busy),
        "send_max": max(sending or [0]),
        "lat": lat,
        "lat_p50": med(lat),
        "lat_p99": pct(lat, 99),
        "lat_max": max(lat or [float("nan")]),
        "rate": med([st["rate"] for st in streams]),
        "edits": med([st["edits"] / st["stream_s"] for st in streams if st["stream_s"] > 0]),
    }


def rows(b: Any, res: dict[str, dict[str, Any]], lines: int, units: int) -> None:
    a = b.a
    o, c = (_pooled(res[k]["streams"]) for k in SIDES)
    what = f"a {lines:,}-line chat"
    b.row(
        "stream_rtt_idle",
        f"request round-trip at idle, just before each reply ({what}), p50 / p99 / max",
        trio(o, "idle_"),
        {"curl": trio(c, "idle_")},
        "-",
        None,
        "ms",
    )
    b.row(
        "stream_rtt",
        f"request round-trip while a reply streams at {a.stream_rate:g} tokens/s into {what}, "
        "p50 / p99 / max",
        trio(o, ""),
        {"curl": trio(c, "")},
        "p99 ≤ 2 ms and ≤ idle p99 + 1 ms",
        o["p99"] <= 2 and o["p99"] - o["idle_p99"] <= 1,
        "ms",
        f"p99 − idle p99 = {o['p99'] - o['idle_p99']:.2f} ms (baseline "
        f"{c['p99'] - c['idle_p99']:.2f} ms); {o['n']} probes of ours and {c['n']} of the "
        f"baseline's over {len(res['ours']['streams'])} replies each of {units:,} tokens, one "
        f"4-character delta each, sent at {a.stream_rate:g}/s (seen arriving in the buffer at "
        f"{o['rate']:.0f} and {c['rate']:.0f}/s); the editor was changed {o['edits']:.0f} "
        f"times a second by ours, {c['edits']:.0f} by the baseline",
    )
    b.row(
        "stream_send_block",
        f"longest request round-trip from `send` to the first delta ({what})",
        o["send_max"],
        {"curl": c["send_max"]},
        "-",
        None,
        "ms",
        f"over the {len(res['ours']['streams'])} paced replies of each side: `send` is "
        "answered at once and the host builds the request after its answer; "
        "the baseline builds it in the editor",
    )
    b.row(
        "stream_chunk",
        "a streamed delta's arrival at the host → its text in the buffer, p99",
        o["lat_p99"],
        {"curl": c["lat_p99"]},
        "p99 ≤ 20 ms",
        o["lat_p99"] <= 20,
        "ms",
        f"from the fake provider writing a delta on loopback to a Lua on_lines watcher seeing "
        f"its text; p50 {o['lat_p50']:.2f} ms, max {o['lat_max']:.2f} ms over {len(o['lat'])} "
        f"stamped deltas (every 20th); baseline (curl's output through jobstart into Lua) "
        f"p50 {c['lat_p50']:.2f} ms, max {c['lat_max']:.2f} ms over {len(c['lat'])}",
    )
    sends = {k: res[k]["sends"] for k in SIDES}
    first = {k: res[k]["first_send"] for k in SIDES}
    body = b.raw["stream_body_mb"]
    b.row(
        "stream_send",
        f"`send` on {what} → first request byte at the provider",
        med(sends["ours"]),
        {"curl": med(sends["curl"])},
        "≤ 30 ms",
        med(sends["ours"]) <= 30,
        "ms",
        f"median of {len(sends['ours'])} sends after a first one (each: "
        f"{', '.join(f'{v:.1f}' for v in sends['ours'])} ms; the first: {first['ours']:.1f} ms); "
        f"baseline: Lua reads the chat into messages, encodes the JSON, writes it to a file and "
        f"starts curl (each: {', '.join(f'{v:.1f}' for v in sends['curl'])} ms; the first: "
        f"{first['curl']:.1f} ms); the request bodies: {body['ours']:.1f} MB (ours, with the "
        f"tools' schemas and the calls as native blocks) and {body['curl']:.1f} MB",
    )
    mem = {k: res[k]["mem"] for k in SIDES}
    b.row(
        "stream_mem",
        f"editor memory growth over a {a.reply_mb:g} MB streamed reply (max VmRSS − before)",
        mem["ours"]["rss_growth_mb"],
        {"curl": mem["curl"]["rss_growth_mb"]},
        "≤ 5 MB",
        mem["ours"]["rss_growth_mb"] <= 5,
        "MB",
        f"into {what}, each side in a fresh editor, the reply unpaced in deltas of 16 "
        f"characters ({mem['ours']['stream_s']:.1f} s for ours, {mem['curl']['stream_s']:.1f} s "
        f"for the baseline), counted until 1 s after its end; the host grew "
        f"{mem['ours'].get('host_growth_mb', float('nan')):.1f} MB; round-trip p99 meanwhile "
        f"{pct(mem['ours']['busy_rtt'], 99):.2f} ms (baseline "
        f"{pct(mem['curl']['busy_rtt'], 99):.2f} ms)",
    )
