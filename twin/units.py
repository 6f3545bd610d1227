"""Parsing of the human units used in lab and scenario files (tc's spelling), and the one
conversion from what a periodic task costs to the period a CPU budget allows."""

from __future__ import annotations

import math
import re

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(bit|kbit|mbit|gbit)\s*$", re.IGNORECASE)
_RATE_FACTOR = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(b|kib|mib|gib|kb|mb|gb)?\s*$", re.IGNORECASE)
_SIZE_FACTOR = {"b": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "kb": 1e3, "mb": 1e6, "gb": 1e9}
_TIME = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|ms|s)\s*$", re.IGNORECASE)
_TIME_FACTOR = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_rate_bps(text: str) -> int:
    """'200mbit' -> 200_000_000 bits per second. ValueError names the accepted units."""
    match = _RATE.match(str(text))
    if not match:
        raise ValueError("rate must be a number with a unit: bit, kbit, mbit or gbit (e.g. 200mbit)")
    return int(float(match.group(1)) * _RATE_FACTOR[match.group(2).lower()])


def parse_size_bytes(text: str | int) -> int:
    """'8MiB' -> 8388608; a bare number is bytes."""
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError("size must be a number with a unit: B, KB, MB, GB, KiB, MiB or GiB (e.g. 8MiB)")
    return int(float(match.group(1)) * _SIZE_FACTOR[(match.group(2) or "b").lower()])


def parse_time_s(text: str) -> float:
    """'20us' -> 2e-05 seconds."""
    match = _TIME.match(str(text))
    if not match:
        raise ValueError("time must be a number with a unit: ns, us, ms or s (e.g. 20us)")
    return float(match.group(1)) * _TIME_FACTOR[match.group(2).lower()]


def format_rate(bps: float) -> str:
    for unit, factor in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= factor:
            return f"{bps / factor:.4g} {unit}"
    return f"{bps:.0f} bit/s"


def period_within(cost_per_period: float, cores: float, step: float = 1) -> float:
    """The shortest period, a whole number of `step`s, at which a task that takes `cost_per_period`
    of CPU time each period keeps within `cores` (the cost in the unit the period is wanted in: CPU
    seconds for a period in seconds). How the twin times its LLDP frames, BGP keepalives and BFD."""
    return math.ceil(cost_per_period / cores / step) * step
