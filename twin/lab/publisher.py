"""A real-time loop's publications, stored from a thread of its own: the PFC controller's counters
(pfc/published.py), the BFD data plane's statistics (bfd/dataplane.py).

Why a thread: writing and renaming a file waits for the file system, and on this machine's ext4
run directory (mounted with `discard`) a rename over the previous file waited for the old blocks'
discard and for writeback throttling: 243 ms in the PFC controller's loop while a lab was busy
(its XOFF events waited as long: drops), and 0.6 s in the BFD data plane's while two other
processes wrote to the disk (2026-12-07, /proc/<pid>/stack: blkdev_issue_discard under
do_renameat2; wbt_wait under ext4_rename). The data plane sends no ticks while it waits, so every
session a lab has in the kernel expired at once when a wait reached the detection time (0.9 s),
and the lab's BGP went with them. The thread holds no CPU and no interpreter lock while it waits.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


def store(path: Path, data: bytes) -> None:
    """Replace the file with `data` (readers see the old file or the new, never half)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def below_creator() -> None:
    """Keep the calling thread real-time when its creator is, one priority step below it. At
    normal priority a busy machine kept the publisher off the CPU while it held the interpreter
    lock, and the real-time loop waited for the lock: on rail8 at 100 Mbit/s with the cores 90 %
    busy, reaction max 47 ms against 15 ms with the stores in the loop (one 30 s run each). The
    thread spends its time in the file system's waits, which hold no CPU and no lock."""
    if os.sched_getscheduler(0) == os.SCHED_FIFO:
        priority = os.sched_getparam(0).sched_priority
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(max(1, priority - 1)))


class Publisher:
    """Stores the publications submitted to it at `path` from a thread one real-time priority step
    below its creator's (below_creator), the newest replacing one not yet stored. `what` names them
    in an error: a publication that cannot be stored (the lab's directory went, the disk is full)
    is one of `errors`, never a crash of the loop."""

    def __init__(self, path: Path, what: str):
        self.path, self.what = path, what
        self._next: bytes | None = None
        self._closing = False
        self._wake = threading.Condition()
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._run, name="publisher", daemon=True)
        self._thread.start()

    def submit(self, data: bytes) -> None:
        with self._wake:
            self._next = data
            self._wake.notify()

    def close(self) -> None:
        """Store what was submitted last, then end the thread."""
        with self._wake:
            self._closing = True
            self._wake.notify()
        self._thread.join()

    def _run(self) -> None:
        below_creator()
        while True:
            with self._wake:
                while self._next is None and not self._closing:
                    self._wake.wait()
                data, self._next = self._next, None
            if data is not None:
                try:
                    store(self.path, data)
                except OSError as exc:
                    self.errors.append(f"cannot publish {self.what}: {exc}")
            elif self._closing:
                return
