"""`twin train`: operator training sessions (start, hint, answer, reveal, stop, scores)."""

from __future__ import annotations

import getpass
import json
import os
import random
import sys

import click
from rich.markup import escape
from rich.table import Table

from twin.cli.tools import RUNTIME_OPTION, out, progress
from twin.detect.verdicts import Verdict
from twin.errors import TwinError
from twin.faults.registry import FAULTS
from twin.lab.files import open_lab
from twin.lab.handle import Lab
from twin.lab.state import known_labs
from twin.model.targets import resolve
from twin.train import hints, lifecycle, pools
from twin.train.trainee import (
    HINT_COST,
    active_session,
    grade,
    hidden_faults,
    read_sealed_events,
    record_score,
    require_session,
)


def _session_lab(lab: str | None) -> str:
    if lab:
        return lab
    found = [name for name in known_labs() if active_session(name)]
    if len(found) != 1:
        raise TwinError("no training session is running" if not found else
                        f"training sessions run on {', '.join(found)}", hint="name one with --lab")
    return found[0]


LAB_OPTION = click.option("--lab", "lab", default=None, help="The session's lab (default: the one running).")


@click.group()
def train() -> None:
    """Operator training: a hidden fault on a busy fabric; find it, answer, get graded."""


@train.command("start")
@click.option("--level", type=click.IntRange(min(pools.LEVELS), max(pools.LEVELS)), default=1, show_default=True,
              help="1: faults routing sees; 2: silent ones; 3: partial, spreading, several; 4: misconfiguration "
                   "and cabling; 5: not the network (a GPU).")
@click.option("--lab", "lab_ref", default="rail4", show_default=True, help="The lab to train on.")
@click.option("--seed", type=int, default=None, help="Same seed, same fault and moment (for an exercise set).")
@click.option("--trainee", default=None, help="Name for the score history (default: your user name).")
@RUNTIME_OPTION
def train_start(level: int, lab_ref: str, seed: int | None, trainee: str | None, runtime: str | None) -> None:
    """Bring the lab up with a training job and a pingmesh, hide a fault in it, print the briefing."""
    lab_file, fabric = open_lab(lab_ref)
    seed = seed if seed is not None else random.SystemRandom().randrange(1 << 30)
    with progress() as bar:
        session = lifecycle.start(lab_file, fabric.with_runtime(runtime), level, seed,
                                  trainee or os.environ.get("SUDO_USER") or getpass.getuser(), bar)
    name = fabric.name
    out.print(f"[bold]Training session on {name}[/] (level {level}, trainee {session.trainee}). Briefing:\n")
    out.print(escape(session.briefing) + "\n")
    out.print(f"Investigate: twin lab status {name} | twin lab exec {name} NODE -- vtysh/ip/tc/nft/ethtool ... | "
              f"twin dashboard {name}\n"
              f"Answer:      twin train answer --kind KIND --link 'A -- B' (or --node NODE); "
              f"kinds: {', '.join(sorted(n for n, k in FAULTS.items() if k.training_level is not None))}\n"
              f"Stuck:       twin train hint (costs {HINT_COST} points) | twin train reveal | twin train stop")


@train.command("answer")
@click.option("--kind", required=True, help="The fault kind, e.g. silent_drop (see `twin fault kinds`).")
@click.option("--link", help='The link, "A -- B" (either order).')
@click.option("--node",
              help="The node, for faults of a node (" + ", ".join(n for n, k in FAULTS.items() if k.place == "node")
              + ").")
@LAB_OPTION
def train_answer(kind: str, link: str | None, node: str | None, lab: str | None) -> None:
    """Say what and where the fault is; graded right or wrong (a wrong answer may be retried)."""
    name = _session_lab(lab)
    session = require_session(name)
    if bool(link) == bool(node):
        raise TwinError("give the place as exactly one of --link or --node",
                        hint="e.g. --link 'leaf-g1-r1 -- spine-r1-s1' or --node spine-r1-s1")
    FAULTS.get(kind)  # an unknown kind is refused, with the valid ones
    resolve(Lab.open(name).fabric, link or node)  # an unknown link or node too, with what exists
    if session.finished or session.revealed:
        raise TwinError("this session is over", hint="twin train stop, then start another")
    entries = hidden_faults(name)["faults"]
    attempt = grade(session, entries, kind, link, node)
    session.save()
    if attempt.right:
        left = len(entries) - len(session.found)
        out.print(f"[green]RIGHT[/]: {kind} on {attempt.where}, {attempt.t:.0f} s after it started."
                  + (f" {left} more fault(s) to find." if left else ""))
    else:
        out.print(f"[red]WRONG[/]: {'the place is right but not the kind' if attempt.location_right else 'not there'}"
                  f" (-10 points). Try again, or `twin train hint`.")
    if session.finished:
        path = record_score(session, hidden_faults(name))
        out.print(f"Session complete: score {session.score}/100 ({session.hints} hints, "
                  f"{sum(1 for a in session.attempts if not a.right)} wrong answers) -> {path}. "
                  f"`twin train reveal` shows what the detector saw; `twin train stop` ends it.")
    if not attempt.right:
        sys.exit(1)


@train.command("hint")
@LAB_OPTION
def train_hint(lab: str | None) -> None:
    """The next hint (each costs points): first what to look at, then where."""
    name = _session_lab(lab)
    session = require_session(name)
    fabric = Lab.open(name).fabric
    entries = hidden_faults(name)["faults"]
    pending = [e for e in entries if e["id"] not in session.found]
    if not pending:
        out.print("every fault is found: no hints needed")
        return
    text = hints.hint(fabric, pending[0], session.hints)
    if text is None:
        out.print("no more hints: `twin train reveal` shows the answer")
        return
    session.hints += 1
    session.save()
    out.print(f"hint {session.hints} (-{HINT_COST} points): {text}")


@train.command("reveal")
@LAB_OPTION
def train_reveal(lab: str | None) -> None:
    """Show the answer, the ground-truth timeline and what the built-in detector saw, when."""
    name = _session_lab(lab)
    session = require_session(name)
    sealed = hidden_faults(name)
    entries = sealed["faults"]
    events = read_sealed_events(name)
    applied = {e["id"]: e for e in events if e["kind"] == "fault" and e.get("op") == "applied"}
    out.print(f"[bold]The answer[/] (seed {sealed['seed']}):")
    for entry in entries:
        answer = pools.answer_of(entry)
        detail = ", ".join(f"{k}={v}" for k, v in entry.items() if k not in ("id", "kind", "link", "node"))
        found = "found" if entry["id"] in session.found else "not found"
        out.print(f"  {answer.kind} on {answer.where} ({detail}) - {found}")
    out.print("[bold]Timeline[/] (seconds since the job started):")
    onset = min((e["actual_s"] for e in applied.values()), default=0.0)
    for e in sorted(events, key=lambda e: e["t"]):
        if e["kind"] == "fault":
            out.print(f"  {e['t']:7.2f}  fault {e.get('fault_kind', '')} {e['op']}"
                      + (f" on {', '.join(e['targets'])}" if e.get("targets") else ""))
        elif e["kind"] == "verdict":
            named = " or ".join(Verdict.from_record(e).names)  # a set verdict: its candidates
            out.print(f"  {e['t']:7.2f}  {e.get('detector', 'the detector')} named {named} "
                      f"({e['t'] - onset:+.2f} s from onset)")
        elif e["kind"] in ("hang", "recovered") and e.get("rank") == 0:
            out.print(f"  {e['t']:7.2f}  training job {e['kind']}")
    for attempt in session.attempts:
        out.print(f"  answer {attempt.t:6.1f} s after onset: {attempt.kind} on {attempt.where}: "
                  f"{'right' if attempt.right else 'wrong'}")
    if not session.revealed:
        session.revealed = True
        session.save()
        if not session.finished:
            record_score(session, sealed)
    out.print(f"score: {session.score}/100")


@train.command("stop")
@LAB_OPTION
def train_stop(lab: str | None) -> None:
    """End the session: stop the job, clear the faults, tear the lab down (nothing left behind)."""
    name = _session_lab(lab)
    session = require_session(name)
    if not (session.finished or session.revealed):
        record_score(session, hidden_faults(name))  # an abandoned session counts too
    with progress() as bar:
        lifecycle.stop(name, bar)
    out.print(f"training session on {name} ended; lab removed")


@train.command("scores")
@click.option("--trainee", default=None, help="One trainee (default: everyone).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def train_scores(trainee: str | None, as_json: bool) -> None:
    """Score history per trainee."""
    from twin.train.trainee import load_scores, scores_dir
    history = load_scores(trainee)
    if as_json:
        out.print_json(json.dumps(history))
        return
    if not history:
        out.print(f"no scores yet in {scores_dir()}")
        return
    table = Table(title=f"training scores ({scores_dir()})")
    for column in ("trainee", "date", "lab", "level", "score", "found", "hints", "wrong", "time", "fault kinds"):
        table.add_column(column)
    for name, rows in history.items():
        for r in rows:
            table.add_row(name, r["date"], r["lab"], str(r["level"]), str(r["score"]), f"{r['found']}/{r['faults']}",
                          str(r["hints"]), str(r["wrong"]), f"{r['time_s']} s" if r["time_s"] else "-",
                          ", ".join(r["kinds"]) + (" (revealed)" if r["revealed"] else ""))
    out.print(table)
