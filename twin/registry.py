"""One registry pattern for every kind of pluggable thing: runtimes, fault kinds, workload kinds,
detectors, expectations. A registry maps a name to an entry that carries its metadata (a one-line
summary, what it targets, its runbook...), which help text, training pools and docs read from the
same place. An unknown name is an error that lists the valid ones and guesses the typo.

Registries are filled by the package that owns the kinds, in one module that lists them (no
import-time self-registration: the list is readable, and the import graph has no cycles).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from twin.errors import TwinError, closest
from twin.text import key_note, shown_name

T = TypeVar("T")


class UnknownKind(TwinError):
    pass


class Registry(Generic[T]):
    def __init__(self, what: str, plural: str = "kinds"):
        """what: how an entry is called in messages ("fault kind"); plural: how a list of them is
        ("valid kinds: ...")."""
        self.what, self.plural = what, plural
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> T:
        if name in self._entries:
            raise ValueError(f"{self.what} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def get(self, name: str) -> T:
        if name not in self._entries:
            valid = self.names()
            guess = closest(str(name), valid)
            raise UnknownKind(f"unknown {self.what} '{shown_name(name)}'",
                              hint=key_note(name).replace("the key",
                                                          "the name") + (f"did you mean '{guess}'? " if guess else "")
                              + f"valid {self.plural}: {', '.join(valid)}")
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def names(self) -> list[str]:
        return sorted(self._entries)

    def items(self) -> Iterator[tuple[str, T]]:
        return ((n, self._entries[n]) for n in self.names())
