"""Start the host: spawned by Lua with jobstart(rpc=true) (see lua/sidekick_tools/host.lua
`command`: `python -E -c BOOTSTRAP PLUGIN_PATH`, which runs this module the way
`python -m sidekick_tools` would, without the working directory on sys.path).

`SIDEKICK_TOOLS_PROFILE=DIR` runs the host under cProfile and writes
DIR/host-PID.prof when it exits (read it with `python -m pstats`)."""

from __future__ import annotations

import logging
import os
import sys


def main() -> int:
    # Neovim gives its jobs its own server's address: tasks, agents and the
    # commands they start inherit this process's environment, and must not
    # reach the editor (a task could set the plugin's auto-accept through it)
    for name in ("NVIM", "NVIM_LISTEN_ADDRESS"):
        os.environ.pop(name, None)
    # stderr is what the user is shown when the host dies: warnings and errors
    # only (the INFO lines go to host.log)
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setLevel(logging.WARNING)
    logging.basicConfig(level=logging.WARNING, handlers=[stderr])
    try:
        import pynvim
    except ImportError:
        sys.stderr.write(
            f"No module named 'pynvim' for {sys.executable}: run :SidekickInstall or "
            "set setup({ python = ... }) to an interpreter that has it\n"
        )
        return 2
    from .host import Host

    nvim = pynvim.attach("stdio")
    host = Host(nvim)
    try:
        nvim.run_loop(host.on_request, host.on_notification)
    except EOFError:
        pass  # Neovim closed the channel (it quit, or let this host go): the usual end
    finally:
        host.close()  # apply kill_on_exit
    return 0


def profiled(out_dir: str) -> int:
    import cProfile
    import signal

    # Neovim stops its jobs with SIGTERM: end through the finally below
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    prof = cProfile.Profile()
    try:
        return prof.runcall(main)
    finally:
        prof.dump_stats(os.path.join(out_dir, f"host-{os.getpid()}.prof"))


if __name__ == "__main__":
    _profile = os.environ.get("SIDEKICK_TOOLS_PROFILE")
    sys.exit(profiled(_profile) if _profile else main())
