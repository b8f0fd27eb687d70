"""Round-trip prober: a separate RPC client that asks Neovim `nvim_get_mode`
every PERIOD seconds and samples the RSS of some processes.

Run as its own process (so the controller's work never delays a probe):

    python bench/pinger.py SOCKET PERIOD_MS OUT.json STOP_FILE PID[,PID...]

It speaks msgpack-RPC on the socket directly (no pynvim, no greenlets) to keep
the client's own cost out of the figure. Probes are sequential: a slow answer
delays the next probe, it never queues several. It stops when STOP_FILE exists
and writes {"t": [...], "rtt": [...], "rss": {pid: [[t, kib], ...]}}; times are
time.monotonic() seconds, round-trips milliseconds.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

import msgpack

RSS_EVERY = 0.02  # seconds between RSS samples


def rss_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def main() -> int:
    path, period_ms, out, stop_file, pids_arg = sys.argv[1:6]
    period = float(period_ms) / 1000.0
    pids = [int(p) for p in pids_arg.split(",") if p]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    unpacker = msgpack.Unpacker(raw=False)
    ts: list[float] = []
    rtts: list[float] = []
    rss: dict[str, list[list[float]]] = {str(p): [] for p in pids}
    msgid = 0
    next_probe = time.monotonic()
    next_rss = next_probe
    while not os.path.exists(stop_file):
        now = time.monotonic()
        if now >= next_rss:
            for p in pids:
                v = rss_kib(p)
                if v is not None:
                    rss[str(p)].append([now, v])
            next_rss = now + RSS_EVERY
        if now < next_probe:
            time.sleep(max(0.0, min(next_probe, next_rss) - now))
            continue
        msgid += 1
        req = msgpack.packb([0, msgid, "nvim_get_mode", []])
        t0 = time.perf_counter()
        sock.sendall(req)
        answered = False
        while not answered:
            data = sock.recv(65536)
            if not data:
                return 1
            unpacker.feed(data)
            for msg in unpacker:
                if msg[0] == 1 and msg[1] == msgid:
                    answered = True
        t1 = time.perf_counter()
        ts.append(now)
        rtts.append((t1 - t0) * 1000.0)
        next_probe = max(next_probe + period, time.monotonic())
    sock.close()
    with open(out, "w") as f:
        json.dump({"t": ts, "rtt": rtts, "rss": rss}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
