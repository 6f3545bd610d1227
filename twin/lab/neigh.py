"""The kernel's ARP table is one table for every network namespace of the machine: its limits
(gc_thresh1-3, settable in the initial namespace only) count the entries of all namespaces
together. The default gc_thresh3 of 1024 lets the 1,025th address resolution fail ("neighbour
table overflow", sendmsg: ENOBUFS), which is where a lab of ~500 links stops reaching anything.

Every lab reserves the entries it needs before it is built; the limits are the machine's own
values plus the sum of the reservations, and the machine's values come back when the last lab
goes down. The book of reservations lives next to the labs' state, under a lock of its own.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from twin.lab.state import run_root
from twin.model.fabric import Fabric

SYSCTL_DIR = Path("/proc/sys/net/ipv4/neigh/default")
LIMITS = ("gc_thresh1", "gc_thresh2", "gc_thresh3")
BOOK = ".neigh.json"


def entries_needed(fabric: Fabric) -> int:
    """Each end of a link resolves its peer; a node may hold one more (a gateway, a probe)."""
    return 2 * len(fabric.links) + len(fabric.nodes)


@contextmanager
def _book() -> Iterator[dict]:
    root = run_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".neigh.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = root / BOOK
        try:
            book = json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            book = {"original": None, "labs": {}}
        yield book
        if book["labs"]:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(book))
            os.replace(tmp, path)
        else:
            path.unlink(missing_ok=True)


def _read() -> dict[str, int]:
    return {name: int((SYSCTL_DIR / name).read_text()) for name in LIMITS}


def _write(values: dict[str, int]) -> None:
    for name in LIMITS:
        (SYSCTL_DIR / name).write_text(f"{values[name]}\n")


def reserve(lab: str, entries: int) -> dict[str, int]:
    """Raise the machine's limits so that `lab` has `entries` of its own; returns the limits."""
    with _book() as book:
        if book["original"] is None:
            book["original"] = _read()
        book["labs"][lab] = entries
        total = sum(book["labs"].values())
        limits = {name: value + total for name, value in book["original"].items()}
        _write(limits)
        return limits


def release(lab: str) -> None:
    """Give `lab`'s entries back; the last lab restores the machine's own limits. Idempotent."""
    with _book() as book:
        if lab not in book["labs"]:
            return
        del book["labs"][lab]
        total = sum(book["labs"].values())
        _write({name: value + total for name, value in book["original"].items()})


def reserved() -> dict[str, int]:
    """Entries reserved per lab that is up (for `twin lab status`)."""
    with _book() as book:
        return dict(book["labs"])
