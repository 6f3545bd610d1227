"""A training session's files, grading, hints and score history.

<lab dir>/training/
  session.json    public: trainee, level, times, attempts, hints used, the briefing
  answer.sealed   the seed and the hidden faults (sealed with <lab dir>/training.key); the
                  seed is sealed too, since it determines the faults
  events.sealed   the trainer's event log, one sealed record per line (ground truth, verdicts)
  progress.json   the trainer's phase: starting | ready | injected | stopped (no answer in it)
Scores: $FABRIC_TWIN_SCORES (default ~/.fabric-twin/scores)/<trainee>.json, one entry per session.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from twin.errors import TwinError
from twin.lab.state import lab_dir
from twin.model.fabric import link_key
from twin.names import trainee_name
from twin.seal import key_of, seal, unseal
from twin.train.pools import Answer, answer_of

POINTS = 100
HINT_COST = 15
WRONG_COST = 10


def training_dir(lab: str) -> Path:
    return lab_dir(lab) / "training"


def scores_dir() -> Path:
    return Path(os.environ.get("FABRIC_TWIN_SCORES", Path.home() / ".fabric-twin" / "scores"))


@dataclass
class Attempt:
    t: float
    kind: str
    where: str
    right: bool
    location_right: bool


@dataclass
class TrainingSession:
    """A trainee's session on a lab (session.json): what they were briefed, asked and answered. Not
    the run's `run.session.Session`, which runs the session's job, probes and faults."""
    lab: str
    trainee: str
    level: int
    started: float = field(default_factory=time.time)
    injected: float | None = None  # wall time the fault came (the briefing says "since")
    briefing: str = ""
    hints: int = 0
    attempts: list[Attempt] = field(default_factory=list)
    found: list[str] = field(default_factory=list)  # fault ids answered right
    finished: float | None = None
    revealed: bool = False

    @property
    def directory(self) -> Path:
        return training_dir(self.lab)

    def save(self) -> None:
        tmp = self.directory / "session.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=1))
        os.replace(tmp, self.directory / "session.json")

    @property
    def score(self) -> int:
        if self.revealed and not self.finished:
            return 0
        wrong = sum(1 for a in self.attempts if not a.right)
        return max(0, POINTS - HINT_COST * self.hints - WRONG_COST * wrong)


def active_session(lab: str) -> TrainingSession | None:
    path = training_dir(lab) / "session.json"
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    raw["attempts"] = [Attempt(**a) for a in raw.get("attempts", [])]
    return TrainingSession(**raw)


def require_session(lab: str) -> TrainingSession:
    session = active_session(lab)
    if session is None:
        raise TwinError(f"no training session on lab '{lab}'", hint="start one: twin train start")
    return session


def seal_answer(lab: str, entries: list[dict]) -> None:
    (training_dir(lab) / "answer.sealed").write_text(seal(key_of(lab_dir(lab)), json.dumps(entries)))


def hidden_faults(lab: str) -> dict:
    """{"seed": ..., "faults": [fault entries]}"""
    return json.loads(unseal(key_of(lab_dir(lab)), (training_dir(lab) / "answer.sealed").read_text()))


def read_sealed_events(lab: str) -> list[dict]:
    path = training_dir(lab) / "events.sealed"
    if not path.exists():
        return []
    key = key_of(lab_dir(lab))
    return [json.loads(unseal(key, line)) for line in path.read_text().splitlines() if line.strip()]


def grade(session: TrainingSession, entries: list[dict], kind: str, link: str | None, node: str | None) -> Attempt:
    """Right when kind and place match a fault not yet found; location alone is reported too."""
    given = Answer(kind, link=link_key(link) if link else None, node=node)
    open_faults = [(e["id"], answer_of(e)) for e in entries if e["id"] not in session.found]
    located = [(fid, a) for fid, a in open_faults if a.at(given.link, given.node)]
    right = next((fid for fid, a in located if a.kind == kind), None)
    attempt = Attempt(t=round(time.time() - (session.injected or session.started), 1), kind=kind,
                      where=given.where, right=right is not None, location_right=bool(located))
    session.attempts.append(attempt)
    if right:
        session.found.append(right)
        if len(session.found) == len(entries):
            session.finished = time.time()
    return attempt


def record_score(session: TrainingSession, sealed: dict) -> Path:
    """Append the session to the trainee's history (`sealed`: its seed and faults)."""
    entries = sealed["faults"]
    directory = scores_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{trainee_name(session.trainee)}.json"
    history = json.loads(path.read_text()) if path.exists() else []
    history.append({
        "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(session.started)), "lab": session.lab,
        "level": session.level, "seed": sealed["seed"], "score": session.score, "hints": session.hints,
        "wrong": sum(1 for a in session.attempts if not a.right),
        "found": len(session.found), "faults": len(entries), "revealed": session.revealed,
        "time_s": round(session.finished - session.injected, 1) if session.finished and session.injected else None,
        "kinds": sorted({e["kind"] for e in entries}),
    })
    path.write_text(json.dumps(history, indent=1))
    return path


def load_scores(trainee: str | None) -> dict[str, list[dict]]:
    trainee = trainee_name(trainee) if trainee is not None else None  # names a file: checked first
    directory = scores_dir()
    if not directory.is_dir():
        return {}
    files = [directory / f"{trainee}.json"] if trainee else sorted(directory.glob("*.json"))
    return {p.stem: json.loads(p.read_text()) for p in files if p.exists()}
