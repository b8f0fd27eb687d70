"""Start the host: `python -m sidekick_tools`, spawned by Lua with jobstart(rpc=true)."""

from __future__ import annotations

import logging
import sys


def main() -> int:
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
    finally:
        host.close()  # Neovim closed our stdin: apply kill_on_exit
    return 0


if __name__ == "__main__":
    sys.exit(main())
