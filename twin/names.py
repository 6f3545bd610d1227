"""Names people give on the command line, checked before anything touches the file system.

A lab's name becomes a directory under the run directory, namespace and container names, nft
tables; a trainee's name a scores file. A name joined onto a directory unchecked is a path:
`twin lab down ../x` once removed a directory beside the run directory, as root. Every command
that takes such a name passes it through here first; a name that is not one is refused with the
pattern it must match, and nothing is read, written or removed.
"""

from __future__ import annotations

import re

from twin.errors import TwinError
from twin.text import shown_name

LAB_NAME_PATTERN = r"^[a-z][a-z0-9-]{0,11}$"
TRAINEE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class InvalidNameError(TwinError):
    """A name given on the command line is not a valid name of its kind."""


def lab_name(name: str) -> str:
    """`name` if it is a lab name (what a lab file's `name:` may be), else an InvalidNameError."""
    if isinstance(name, str) and re.fullmatch(LAB_NAME_PATTERN, name):
        return name
    raise InvalidNameError(f"'{shown_name(name)}' is not a lab name",
                           hint="a lab name is a lowercase letter and up to 11 of a-z, 0-9 and - (e.g. rail4); "
                                "`twin lab list` shows the labs on this machine")


def is_lab_name(name: str) -> bool:
    return isinstance(name, str) and re.fullmatch(LAB_NAME_PATTERN, name) is not None


def trainee_name(name: str) -> str:
    if isinstance(name, str) and re.fullmatch(TRAINEE_PATTERN, name) and name not in (".", ".."):
        return name
    raise InvalidNameError(f"'{shown_name(name)}' is not a trainee name",
                           hint="letters, digits, '.', '_' and '-', starting with a letter or digit, at most 64")

