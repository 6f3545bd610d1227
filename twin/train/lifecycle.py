"""Starting and stopping a training session: the lab up and sealed, the trainer (train/loop.py)
started as a process the lab owns and followed through its phases, the briefing written once
the fault shows; at the end, the trainer stopped and the lab torn down."""

from __future__ import annotations

import json
import os
import signal
import time

from twin.errors import TwinError
from twin.lab import deploy
from twin.lab.handle import Lab, python_module
from twin.model.fabric import Fabric
from twin.names import trainee_name
from twin.procs import alive, terminate
from twin.progress import Progress
from twin.seal import new_key
from twin.spec.labfile import LabFile
from twin.train import pools
from twin.train.briefing import briefing
from twin.train.trainee import TrainingSession, read_sealed_events, require_session, seal_answer, training_dir

READY_TIMEOUT_S = 180
SYMPTOMS_S = 10  # of fault before the briefing: long enough for the job and the pingmesh to show it
STOP_GRACE_S = 30
TRAINER = "train/loop"


def start(lab_file: LabFile, fabric: Fabric, level: int, seed: int, trainee: str,
          progress: Progress) -> TrainingSession:
    """Bring the lab up with a training job and a pingmesh, hide the level's faults in it, and
    return the session once its briefing is written. A failure tears the lab down."""
    trainee = trainee_name(trainee)  # names a scores file: checked before anything is built
    entries = pools.draw(fabric, level, seed)  # before anything is built: a bad lab changes nothing
    name = fabric.name
    lab = deploy.up(lab_file, fabric, progress)
    try:
        new_key(lab.paths.root)
        lab.state.sealed = True
        lab.state.save()
        lab.paths.training.mkdir()
        TrainingSession(lab=name, trainee=trainee, level=level).save()
        seal_answer(name, {"seed": seed, "faults": entries})
        lab.spawn_owned(TRAINER, python_module("twin.train.loop", str(lab.paths.root)),
                        lab.paths.training / "trainer.log")
        progress.phase("starting the training job and the pingmesh", None)
        _wait_phase(name, "ready", READY_TIMEOUT_S)
        progress.phase("the job is running: watch it", None)
        _wait_phase(name, "injected", 60)
        time.sleep(SYMPTOMS_S)
    except BaseException:
        progress.note("training start failed: tearing the lab down")
        stop_trainer(name)
        deploy.down(name, progress)
        raise
    session = require_session(name)
    session.injected = _onset_wall(name)
    session.briefing = briefing(read_sealed_events(name), session.injected)
    session.save()
    return session


def stop(name: str, progress: Progress) -> None:
    """Stop the trainer (it stops the job and clears the faults) and tear the lab down."""
    progress.phase("stopping the training job", None)
    stop_trainer(name)
    deploy.down(name, progress)


def stop_trainer(name: str) -> None:
    """SIGTERM the trainer, wait, then make sure."""
    lab = Lab.open(name)
    pids = [r.pid for r in lab.owned("worker", TRAINER) if r.pid and alive(r.pid)]
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    terminate(pids)


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
