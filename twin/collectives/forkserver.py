"""One process per collective job that imports torch once and forks the job's ranks into their
hosts' namespaces (namespace labs; a container's ranks start in the container, as before).

    python -m twin.collectives.forkserver <job.json>

A rank started as a process of its own imports torch first: 2 s of CPU each, so rail4's 16 ranks
spent 18 s on the machine's two cores before their first collective (measured with `twin lab up
rail4` and a 1 MiB allreduce). A rank forked from this server shares its interpreter, torch
included, copy-on-write, and starts in milliseconds; it then runs worker.main() as the process
`python -m twin.collectives.worker` would have.

Protocol, one line each way: `ready` once the imports are done; then for each request on stdin,
`<rank> <namespace path> <log path> [--rejoin]`, the new rank's pid. A closed stdin (the launcher
ended, or crashed) ends the server, and every rank with it (PR_SET_PDEATHSIG): no rank outlives
the process that follows it.

The server's command line names the job file, which lies in the lab's run directory, and the ranks
inherit it: `twin lab down` recognises both as the lab's own. Ranks are not reaped here: an ended
rank's pid stays held (a zombie) until the server ends, so the pid the launcher recorded can never
name another process meanwhile.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import traceback

from twin.procs import LOAD_NICE, set_priority

PR_SET_PDEATHSIG = 1


def _rank(server: int, job_file: str, rank: str, namespace: str, log: str, extra: list[str]) -> None:
    """In the forked child: become the rank's process in its host's namespace, run it, exit."""
    from pyroute2 import netns as pr_netns

    from twin.collectives import worker

    code = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != server:  # the server ended before the line above took effect
            os._exit(1)
        os.setsid()  # signals to the launcher's group (Ctrl-C) reach it through the launcher, as before
        output = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(output)
        quiet = os.open(os.devnull, os.O_RDONLY)
        os.dup2(quiet, 0)
        os.close(quiet)
        target = os.open(namespace, os.O_RDONLY)
        pr_netns.setns(target)
        os.close(target)
        sys.argv = [worker.__file__, job_file, rank, *extra]
        worker.main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # not the server's interpreter shutdown: its stdin and state are not the rank's


def main() -> None:
    job_file = sys.argv[1]
    set_priority(LOAD_NICE)  # its import is the load's work, whoever starts it
    # What every rank imports, once (worker.main imports torch itself; here it is already loaded).
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401
    from pyroute2 import netns  # noqa: F401

    from twin.collectives import worker  # noqa: F401
    from twin.roce import backend  # noqa: F401

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher ends it (closing stdin), not Ctrl-C
    server = os.getpid()
    print("ready", flush=True)
    for line in sys.stdin:
        rank, namespace, log, *extra = line.split()
        pid = os.fork()
        if pid == 0:
            _rank(server, job_file, rank, namespace, log, extra)
        print(pid, flush=True)


if __name__ == "__main__":
    main()
