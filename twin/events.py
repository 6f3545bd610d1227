"""events.jsonl: one JSON object per line, `t` in seconds since the scenario started."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


class EventLog:
    def __init__(self, path: Path, t0: float | None = None, encode: Callable[[str], str] | None = None):
        """encode: applied to every line written (training sessions seal theirs)."""
        self.path = path
        self._encode = encode or (lambda line: line)
        self.t0 = t0 if t0 is not None else time.monotonic()
        self._lock = threading.Lock()
        self._file = open(path, "a", buffering=1)
        self.records: list[dict] = []
        self._subscribers: list[tuple[str, object]] = []

    def subscribe(self, kind: str, callback) -> None:
        """Call `callback(record)` for every later record of `kind` (from the emitting thread)."""
        self._subscribers.append((kind, callback))

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 4)

    def emit(self, kind: str, t: float | None = None, **fields) -> dict:
        record = {"t": self.now() if t is None else round(t, 4), "kind": kind, **fields}
        with self._lock:
            self._file.write(self._encode(json.dumps(record, default=str)) + "\n")
            self.records.append(record)
        for wanted, callback in self._subscribers:
            if wanted == kind:
                callback(record)
        return record

    def restart_clock(self) -> None:
        """Make now t=0 (the scenario starts once its workloads are ready): earlier records get
        negative times, and the file is rewritten with them."""
        with self._lock:
            delta = time.monotonic() - self.t0
            self.t0 += delta
            for record in self.records:
                record["t"] = round(record["t"] - delta, 4)
            self._file.close()
            self.path.write_text("".join(self._encode(json.dumps(r, default=str)) + "\n" for r in self.records))
            self._file = open(self.path, "a", buffering=1)

    def close(self) -> None:
        with self._lock:
            self._file.close()


@dataclass
class JsonlTail:
    """Reads a JSON-lines file as another process writes it (a rank's or an agent's records),
    whole lines only."""
    path: Path
    offset: int = 0
    pending: str = ""
    damaged: int = 0

    def read(self) -> list[dict]:
        try:
            with open(self.path) as handle:
                handle.seek(self.offset)
                chunk = handle.read()
                self.offset = handle.tell()
        except FileNotFoundError:
            return []
        lines = (self.pending + chunk).split("\n")
        self.pending = lines.pop()
        records = []
        for line in lines:
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError:
                    self.damaged += 1  # a writer killed mid-line, then restarted: skip the fragment
        return records


@dataclass
class Damage:
    """What a JSON-lines file read back could not give: kill -9 or a power loss mid-write cuts the
    last line; a disk error or a foreign write leaves a garbage one."""
    path: Path
    lines: list[int] = field(default_factory=list)  # 1-based numbers of lines that are not records
    cut_last: bool = False  # the last line had no newline and was not whole

    def __bool__(self) -> bool:
        return bool(self.lines)

    def __str__(self) -> str:
        shown = ", ".join(map(str,
                              self.lines[:10])) + (f" and {len(self.lines) - 10} more" if len(self.lines) > 10 else "")
        cut = " (the last one cut off: the run was killed while writing it)" if self.cut_last else ""
        return f"{self.path.name}: {len(self.lines)} damaged line(s) skipped: line {shown}{cut}"


def read_jsonl(path: Path, required: tuple[str, ...] = ()) -> tuple[list[dict], Damage]:
    """Every whole record of a JSON-lines file (an object with the `required` keys), and what was
    damaged. Never raises for what the file holds."""
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    damage = Damage(path)
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:  # JSONDecodeError and UnicodeDecodeError alike
            record = None
        if isinstance(record, dict) and all(key in record for key in required):
            records.append(record)
            continue
        damage.lines.append(number)
        damage.cut_last = damage.cut_last or (number == len(lines) and not raw.endswith(b"\n"))
    return records, damage


EVENT_KEYS = ("t", "kind")


def read_events(path: Path) -> tuple[list[dict], Damage]:
    return read_jsonl(path, EVENT_KEYS)
