"""One exception hierarchy; the CLI prints `error:` and `hint:` from these."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from twin.text import clipped, shown, shown_name

# A problem quotes what the file holds (a value, a key): a 50,000-character value is cut, not
# printed whole (8 MB of output for one file once).
MAX_MESSAGE_CHARS = 400
# A file with thousands of problems has one mistake repeated: the first ones say what it is.
MAX_PROBLEMS_SHOWN = 50
MAX_PROBLEMS_LISTED = 1000


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
        """One line (two with a hint), safe to print: the file's own text in it (keys, values)
        has control and invisible characters escaped, and keys every non-ASCII character."""
        path, message = shown(self.path), clipped(shown(self.message), MAX_MESSAGE_CHARS)
        where = f"{path}:{self.line}" if self.line else path
        text = f"{where}: {shown_name(self.key)}: {message}" if self.key else f"{where}: {message}"
        return text + (f"\n  hint: {clipped(shown(self.hint), MAX_MESSAGE_CHARS)}" if self.hint else "")


class LabFileError(TwinError):
    """A lab (or scenario) file is invalid; carries every problem found in it."""

    def __init__(self, problems: list[Problem], more: int = 0):
        """more: problems found beyond those listed (a file of 50,000 unknown keys lists the first)."""
        self.problems, self.more = list(problems), more
        first = self.problems[0]
        count = len(self.problems) + more
        summary = f"{count} problem{'s' if count > 1 else ''} in {shown(first.path)}"
        lines = [f"  {p}" for p in self.problems[:MAX_PROBLEMS_SHOWN]]
        if count > MAX_PROBLEMS_SHOWN:
            lines.append(f"  ... and {count - MAX_PROBLEMS_SHOWN} more problems (`twin check --json` lists "
                         f"the first {MAX_PROBLEMS_LISTED})")
        super().__init__(summary + ":\n" + "\n".join(lines),
                         hint="fix the file; nothing was created on this machine")

    @classmethod
    def in_file_order(cls, problems: list[Problem], more: int = 0) -> LabFileError:
        """Problems found by separate passes over one file, by line (each pass's order kept on a
        line), the first MAX_PROBLEMS_LISTED listed and the rest counted in `more`."""
        listed = sorted(problems, key=lambda p: p.line or 0)
        return cls(listed[:MAX_PROBLEMS_LISTED], more=more + max(0, len(listed) - MAX_PROBLEMS_LISTED))


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
