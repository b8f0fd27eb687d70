"""Profile the Python host: `bench/run.py --profile-host DIR` puts this folder on
the PYTHONPATH Neovim passes to the host. cProfile runs for the whole life of the
process and the stats go to DIR/host-PID.prof when it exits or gets SIGTERM (read them with
`python -m pstats`). Only processes started as `-m sidekick_tools` are profiled."""

import atexit
import os
import sys

_out = os.environ.get("SIDEKICK_BENCH_PROFILE_DIR")
_argv = getattr(sys, "orig_argv", sys.argv)
if _out and "-m" in _argv and "sidekick_tools" in _argv:
    import cProfile

    _prof = cProfile.Profile()
    _prof.enable()

    def _dump() -> None:
        _prof.disable()
        _prof.dump_stats(os.path.join(_out, f"host-{os.getpid()}.prof"))

    atexit.register(_dump)

    import signal

    def _on_term(signum, frame):  # Neovim stops its jobs with SIGTERM
        atexit.unregister(_dump)
        _dump()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, _on_term)
