"""Ending processes the lab started, by pid, never by name; and keeping the twin's instruments
ahead of the load they measure.

Priorities (Linux nice values are per thread, and a thread or process inherits its creator's):
the fault timeline at URGENT_NICE (kept by the fault applier, a process of its own:
faults/applier.py), the probe agents at INSTRUMENT_NICE, the workloads' processes
(collective ranks) at LOAD_NICE whoever starts them. On the twin's two shared cores a real
fabric's separate CPUs (switch, NIC, monitoring host) become priorities. The runner's other
threads stay at the default: with all of them raised, one CI drill applied a fault 139 ms late
(limit 50 ms; the cause was not isolated), and the drills were measured with them at the default.
A runner thread preempted while holding the interpreter's lock can then delay the probe follower
by seconds, which the mesh's counting tolerates (it counts by the agents' marks, not the clock)."""

from __future__ import annotations

import os
import signal
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

URGENT_NICE = -10
INSTRUMENT_NICE = -5
LOAD_NICE = 0
CPU_LATENCY_QOS = "/dev/cpu_dma_latency"
_latency_request: int | None = None  # the descriptor that holds this process's request, kept open


def set_priority(nice: int) -> None:
    """The calling thread's nice value (and so that of the threads and processes it starts later).
    Raising it needs root (the twin runs as root; a container may lack CAP_SYS_NICE): without
    it, the thread keeps its priority."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except OSError:
        pass


def real_time(priority: int) -> str | None:
    """Run the calling process at SCHED_FIFO `priority` (the lab's emulated hardware: the PFC
    controller, the BFD data plane); the reason when it cannot (no CAP_SYS_NICE in a container)."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except OSError as exc:
        return f"no real-time priority ({exc.strerror})"
    return None


def cpus_awake() -> str | None:
    """Ask the kernel to keep every CPU out of its idle states that take time to leave (a CPU
    latency request of 0 us, PM QoS), until this process exits, however it exits: the request is the
    open descriptor. The reason when it cannot.

    Why: the lab's data plane runs on the kernel's timers (every port's HTB shaper, the PFC gates),
    and a CPU that halted when idle wakes for a timer late. On a VM a halted vCPU waits for its
    host to run it again: a port's shaper lost the line time it slept through (its burst is below
    one jumbo frame), a queue built behind it, ECN marked it and DCQCN cut the senders, so a healthy
    fabric ran at 0.2-0.6 of line (2026-12-02, docs/benchmarks.md). A switch's ASIC never sleeps;
    the twin's CPUs stand in for it while a lab is up (lab/awake.py). The cost: idle CPUs poll
    instead of halting."""
    global _latency_request
    if _latency_request is not None:
        return None
    try:
        fd = os.open(CPU_LATENCY_QOS, os.O_WRONLY | os.O_CLOEXEC)
    except OSError as exc:
        return f"no CPU latency request ({exc.strerror})"
    os.write(fd, struct.pack("i", 0))
    _latency_request = fd
    return None


def stop_on_signals(stop) -> None:
    """SIGTERM and SIGINT call `stop` (a service ends its loop and cleans up) instead of killing."""
    signal.signal(signal.SIGTERM, lambda *_args: stop())
    signal.signal(signal.SIGINT, lambda *_args: stop())


@contextmanager
def ahead_of_the_load(nice: int = URGENT_NICE) -> Iterator[None]:
    """Run the calling thread at a higher priority (never a lower one) until the block ends, so
    that on a machine the workloads keep busy it still wakes on time: a fault applied late is a
    drill that measured the wrong thing."""
    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    set_priority(min(before, nice))
    try:
        yield
    finally:
        set_priority(before)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def children(pid: int) -> list[int]:
    """Pids whose parent is `pid`, from every process's /proc/<pid>/stat (/proc/<pid>/task/<tid>/children
    names only what each thread forked, and only once CONFIG_PROC_CHILDREN is built in)."""
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


def working_dir(pid: int) -> str:
    """Where a process runs: the one mark of a daemon that rewrites its own command line (lldpd's
    "lldpd: monitor.") and environment."""
    try:
        return os.readlink(f"/proc/{pid}/cwd")
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


def reap(pid: int) -> None:
    """Collect one child that has exited: until then its pid is held (a zombie), never reused."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not ours (a container's process), or already collected
        pass


def kill(pids: list[int]) -> None:
    """SIGKILL without waiting (terminate() waits for them and reaps)."""
    for pid in set(pids):
        _signal(pid, signal.SIGKILL)


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
