"""`twin train`: operator training sessions (start, hint, answer, reveal, stop, scores)."""

from __future__ import annotations

import getpass
import json
import os
import random
import signal
import subprocess
import sys
import time

import click
from rich.markup import escape
from rich.table import Table

from twin.lab import deploy
from twin.cli.tools import RichProgress, out, progress_bar
from twin.errors import TwinError
from twin.lab.handle import open_lab, running_lab
from twin.procs import alive, terminate
from twin.lab.runtime import names as runtime_names
from twin.seal import new_key
from twin.lab.state import Resource, known_labs, lab_dir
from twin.train import hints, pools
from twin.train.briefing import briefing
from twin.train.session import (
    HINT_COST, Session, active_session, grade, hidden_faults, read_sealed_events, record_score,
    require_session, seal_answer, training_dir)

READY_TIMEOUT_S = 180
SYMPTOMS_S = 10  # of fault before the briefing: long enough for the job and the pingmesh to show it
STOP_GRACE_S = 30


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
@click.option("--level", type=click.IntRange(1, 3), default=1, show_default=True,
              help="1: faults routing sees; 2: silent ones; 3: partial, spreading, several.")
@click.option("--lab", "lab_ref", default="rail4", show_default=True, help="The lab to train on.")
@click.option("--seed", type=int, default=None, help="Same seed, same fault and moment (for an exercise set).")
@click.option("--trainee", default=None, help="Name for the score history (default: your user name).")
@click.option("--runtime", type=click.Choice(runtime_names()), default=None, help="netns (default) or docker.")
def train_start(level: int, lab_ref: str, seed: int | None, trainee: str | None, runtime: str | None) -> None:
    """Bring the lab up with a training job and a pingmesh, hide a fault in it, print the briefing."""
    lab_file, fabric = open_lab(lab_ref)
    fabric.runtime = runtime or fabric.runtime
    seed = seed if seed is not None else random.SystemRandom().randrange(1 << 30)
    entries = pools.draw(fabric, level, seed)  # before anything is built: a bad lab changes nothing
    name = fabric.name
    with progress_bar() as bar:
        progress = RichProgress(bar)
        state = deploy.up(lab_file, fabric, progress)
        try:
            new_key(state.directory)
            state.sealed = True
            state.save()
            training_dir(name).mkdir()
            session = Session(lab=name, trainee=trainee or os.environ.get("SUDO_USER") or getpass.getuser(),
                              level=level)
            session.save()
            seal_answer(name, {"seed": seed, "faults": entries})
            resource = state.record(Resource(kind="worker", name="train/loop"))
            with open(training_dir(name) / "trainer.log", "ab") as log:
                resource.pid = subprocess.Popen([sys.executable, "-m", "twin.train.loop", str(lab_dir(name))],
                                                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                                start_new_session=True).pid
            state.save()
            progress.phase("starting the training job and the pingmesh", None)
            _wait_phase(name, "ready", READY_TIMEOUT_S)
            progress.phase("the job is running: watch it", None)
            _wait_phase(name, "injected", 60)
            time.sleep(SYMPTOMS_S)
        except BaseException:
            progress.note("training start failed: tearing the lab down")
            _stop_trainer(name)
            deploy.down(name, progress)
            raise
    session = require_session(name)
    session.injected = _onset_wall(name)
    session.briefing = briefing(read_sealed_events(name), session.injected)
    session.save()
    out.print(f"[bold]Training session on {name}[/] (level {level}, trainee {session.trainee}). Briefing:\n")
    out.print(escape(session.briefing) + "\n")
    out.print(f"Investigate: twin lab status {name} | twin lab exec {name} NODE -- vtysh/ip/tc/nft/ethtool ... | "
              f"twin dashboard {name}\n"
              f"Answer:      twin train answer --kind KIND --link 'A -- B' (or --node NODE); "
              f"kinds: {', '.join(sorted(_kinds()))}\n"
              f"Stuck:       twin train hint (costs {HINT_COST} points) | twin train reveal | twin train stop")


def _kinds() -> list[str]:
    from twin.faults import kinds
    return kinds()


def _onset_wall(lab: str) -> float:
    applied = [e for e in read_sealed_events(lab) if e["kind"] == "fault" and e.get("op") == "applied"]
    return min(e["wall"] for e in applied)


def _wait_phase(lab: str, phase: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    path = training_dir(lab) / "progress.json"
    while time.monotonic() < deadline:
        try:
            now = json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            now = {"phase": "starting"}
        if now["phase"] == phase:
            return
        if now["phase"] in ("failed", "stopped"):
            raise TwinError(f"the training job did not start: {now.get('error', now['phase'])}",
                            hint=f"log: {training_dir(lab) / 'trainer.log'}")
        time.sleep(0.2)
    raise TwinError(f"the trainer did not reach '{phase}' within {timeout_s:.0f} s",
                    hint=f"log: {training_dir(lab) / 'trainer.log'}")


def _stop_trainer(lab: str) -> None:
    """SIGTERM the trainer (it stops the job and clears the faults), wait, then make sure."""
    state, _fabric = running_lab(lab)
    pids = [r.pid for r in state.resources if r.name == "train/loop" and r.pid and alive(r.pid)]
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    terminate(pids)


@train.command("answer")
@click.option("--kind", required=True, help="The fault kind, e.g. silent_drop (see `twin fault kinds`).")
@click.option("--link", help='The link, "A -- B" (either order).')
@click.option("--node", help="The node, for faults of a node (switch_down, blackhole, slow_node, pfc_storm).")
@LAB_OPTION
def train_answer(kind: str, link: str | None, node: str | None, lab: str | None) -> None:
    """Say what and where the fault is; graded right or wrong (a wrong answer may be retried)."""
    name = _session_lab(lab)
    session = require_session(name)
    _state, fabric = running_lab(name)
    if bool(link) == bool(node):
        raise TwinError("give the place as exactly one of --link or --node",
                        hint="e.g. --link 'leaf-g1-r1 -- spine-r1-s1' or --node spine-r1-s1")
    if kind not in _kinds():
        raise TwinError(f"unknown fault kind '{kind}'", hint=f"kinds: {', '.join(sorted(_kinds()))}")
    where = [part.strip() for part in link.split("--")] if link else [node]
    unknown = [n for n in where if n not in fabric.nodes]
    if unknown or (link and len(where) != 2):
        raise TwinError(f"lab {name} has no {'link' if link else 'node'} '{link or node}'",
                        hint=f"see `twin lab show {name}`")
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
    _state, fabric = running_lab(name)
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
            out.print(f"  {e['t']:7.2f}  probe-localizer named {e.get('link') or e.get('node')} "
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
    with progress_bar() as bar:
        progress = RichProgress(bar)
        progress.phase("stopping the training job", None)
        _stop_trainer(name)
        deploy.down(name, progress)
    out.print(f"training session on {name} ended; lab removed")


@train.command("scores")
@click.option("--trainee", default=None, help="One trainee (default: everyone).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def train_scores(trainee: str | None, as_json: bool) -> None:
    """Score history per trainee."""
    from twin.train.session import load_scores, scores_dir
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
