"""What every `twin` command shares: the consoles and the progress bar that renders library progress."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

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


def progress_bar() -> Progress:
    return Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=False)


