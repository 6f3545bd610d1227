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


@contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold SIGINT/SIGTERM until the block is done: a teardown interrupted halfway would leave
    the very things it exists to remove. The signal is re-raised afterwards."""
    received: list[int] = []

    def hold(signum, frame):
        received.append(signum)

    try:
        previous = {sig: signal.signal(sig, hold) for sig in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if received:
            os.kill(os.getpid(), received[0])
