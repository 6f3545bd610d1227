"""Run an operator's detector as a process the lab owns, and pass its stdout through.

    python -m twin.detect.external <lab-dir> -- <command...>

This wrapper's command line names the lab directory, so `twin lab down` ends it by pid even
after the runner was killed; it then ends the detector (which also gets SIGKILL if the
wrapper itself is killed: PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def main() -> None:
    command = sys.argv[sys.argv.index("--") + 1:]
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)

    def stop(*_args) -> None:
        child.terminate()
        try:
            child.wait(timeout=3)
        except subprocess.TimeoutExpired:
            child.kill()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    sys.exit(child.wait())


if __name__ == "__main__":
    main()
