"""One exception hierarchy; the CLI prints `error:` and `hint:` from these."""

from __future__ import annotations

import difflib
from dataclasses import dataclass


class TwinError(Exception):
    """Base of every error the tool reports to a person."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class Problem:
    """One problem found in an input file, with where it is and what to do."""

    path: str
    line: int | None
    key: str
    message: str
    hint: str | None = None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        text = f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"
        return text + (f"\n  hint: {self.hint}" if self.hint else "")


class LabFileError(TwinError):
    """A lab (or scenario) file is invalid; carries every problem found in it."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        first = self.problems[0]
        count = len(self.problems)
        summary = f"{count} problem{'s' if count > 1 else ''} in {first.path}"
        super().__init__(summary + ":\n" + "\n".join(f"  {p}" for p in self.problems),
                         hint="fix the file; nothing was created on this machine")


class PrivilegeError(TwinError):
    pass


class MissingDependencyError(TwinError):
    pass


class RuntimeBackendError(TwinError):
    """A kernel, daemon or runtime operation failed."""


class LabStateError(TwinError):
    """The lab is not in the state the command needs (not up, already up, ...)."""


class ConvergenceError(TwinError):
    pass


def closest(word: str, choices: list[str]) -> str | None:
    """The choice a typo most likely meant ("did you mean ...?"), if any is close."""
    match = difflib.get_close_matches(word, choices, n=1, cutoff=0.5)
    return match[0] if match else None
