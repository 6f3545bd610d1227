"""events.jsonl: one JSON object per line, `t` in seconds since the scenario started."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
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
        return [json.loads(line) for line in lines if line.strip()]


def read_events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
