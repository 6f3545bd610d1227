"""Ending processes the lab started, by pid, never by name; and keeping a timeline's thread
ahead of the load it starts."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

URGENT_NICE = -10


@contextmanager
def ahead_of_the_load() -> Iterator[None]:
    """Run the calling thread (only it: Linux nice values are per thread) at a higher priority,
    so that on a machine the workloads keep busy it still wakes on time: a fault applied late is
    a drill that measured the wrong thing. Needs root (the twin runs as root); without it, the
    thread keeps its priority."""
    tid = threading.get_native_id()
    before = os.getpriority(os.PRIO_PROCESS, tid)
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(before, URGENT_NICE))
    except OSError:
        pass
    try:
        yield
    finally:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, before)
        except OSError:
            pass


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def children(pid: int) -> list[int]:
    """Pids whose parent is `pid` (from /proc/<pid>/stat: this kernel has no .../children)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def terminate(pids: list[int], grace_s: float = 0.5) -> None:
    """SIGTERM, wait up to grace_s, then SIGKILL what is left; reap our own children."""
    pids = [p for p in set(pids) if alive(p)]
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        _reap()
        pids = [p for p in pids if alive(p)]
        if pids:
            time.sleep(0.02)
    for pid in pids:
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + 2.0
    while pids and time.monotonic() < deadline:
        _reap()
        pids = [p for p in pids if alive(p)]
        if pids:
            time.sleep(0.02)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
