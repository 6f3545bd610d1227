"""Fault kinds register by name; an unknown name lists the valid ones."""

from __future__ import annotations

from twin.errors import TwinError
from twin.faults.base import FaultKind

_KINDS: dict[str, FaultKind] = {}


def register(kind: FaultKind) -> FaultKind:
    if kind.name in _KINDS:
        raise ValueError(f"fault kind {kind.name!r} is already registered")
    _KINDS[kind.name] = kind
    return kind


def kinds() -> list[str]:
    _load()
    return sorted(_KINDS)


def get_kind(name: str) -> FaultKind:
    _load()
    if name not in _KINDS:
        raise TwinError(f"unknown fault kind '{name}'", hint=f"valid kinds: {', '.join(sorted(_KINDS))}")
    return _KINDS[name]


def _load() -> None:
    # Importing the modules registers them; done lazily so base modules import cleanly.
    from twin.faults import (  # noqa: F401
        bgp_down, bitflip, blackhole, flap, link_down, pfc_pause, pfc_storm, silent_drop, slow_node,
        switch_down)
