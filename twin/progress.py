"""Progress events from the library; the CLI renders them, tests ignore them."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    def phase(self, name: str, total: int | None = None) -> None:
        """A new step begins; `total` units of work follow (None: unknown)."""

    def advance(self, amount: int = 1) -> None: ...

    def note(self, message: str) -> None:
        """Something worth telling a person (a retry, a warning)."""


class NullProgress:
    def phase(self, name: str, total: int | None = None) -> None:
        pass

    def advance(self, amount: int = 1) -> None:
        pass

    def note(self, message: str) -> None:
        pass
