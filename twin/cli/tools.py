"""What every `twin` command shares: the consoles, the progress bar that renders library progress,
shared options."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from twin.errors import TwinError
from twin.lab.runtime import names as runtime_names
from twin.text import shown

console = Console(stderr=True, soft_wrap=True)
out = Console(soft_wrap=True, width=160)


class RichProgress:
    """Renders library progress events as a rich progress bar on stderr."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.task = None

    def phase(self, name: str, total: int | None = None) -> None:
        if self.task is not None:
            self.progress.update(self.task, completed=self.progress.tasks[self.task].total or 1,
                                 total=self.progress.tasks[self.task].total or 1)
        self.task = self.progress.add_task(name, total=total)

    def advance(self, amount: int = 1) -> None:
        if self.task is not None:
            self.progress.advance(self.task, amount)

    def note(self, message: str) -> None:
        self.progress.console.print(f"[yellow]{message}[/]")


def until_interrupted() -> None:
    """Block until Ctrl-C (a server command's foreground; the caller's `finally` stops it)."""
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


def progress_bar() -> Progress:
    return Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=False,
                    refresh_per_second=2)  # its thread shares the interpreter with a run's instruments




@contextmanager
def progress() -> Iterator[RichProgress]:
    """Library progress for the length of a block, as a bar on stderr."""
    with progress_bar() as bar:
        yield RichProgress(bar)


def write_output(path: Path, write: Callable[[Path], object]) -> None:
    """Run `write(path)` for an output file a person named (-o, --out); a path that cannot be
    written (no such folder, no permission, a directory, a full disk) is a clear error, not a
    traceback."""
    try:
        write(path)
    except OSError as exc:
        where = exc.filename or path
        raise TwinError(f"cannot write {shown(where)}: {exc.strerror or exc}",
                        hint="choose a path in a folder that exists and that you may write") from None


RUNTIME_OPTION = click.option("--runtime", type=click.Choice(runtime_names()), default=None,
                              help="Run the lab on this runtime instead of the lab file's (netns, docker).")
