"""SIGTERM handled like Ctrl-C in long operations, so their cleanup runs."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """pyroute2 forks helper children that inherit this handler and are ended with SIGTERM;
    in them it simply exits, never unwinding into our cleanup code."""
    owner = os.getpid()

    def handler(signum, frame):
        if os.getpid() != owner:
            os._exit(128 + signum)
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
