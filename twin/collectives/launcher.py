"""Start the ranks of one collective job in the host namespaces, follow them, end them.

Each rank is a process recorded in the lab state (kind `worker`) before it starts; its
command line names the job file inside the lab's run directory, which is how `twin lab
down` recognises it as the lab's own. Ranks are ended by pid, never by name.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from twin.errors import TwinError
from twin.events import JsonlTail
from twin.lab.handle import Lab, python_module
from twin.lab.identity import share_with_ranks
from twin.model.nics import Nic
from twin.procs import alive, terminate


@dataclass
class JobSpec:
    name: str
    ops: list[str]  # bench: each in turn; loop: the first
    nics: list[Nic]
    sizes: list[int]
    mode: str = "bench"  # bench | loop
    iters: int = 5
    warmup: int = 1
    channels: int = 1
    timeout_s: float = 30.0
    compute_ms: float = 0.0
    duration_s: float = 0.0
    transport: str = "tcp"  # tcp: gloo | roce: the emulated RoCE transport (twin/roce)
    roce: dict = field(default_factory=dict)  # ib_timeout, retry_cnt, qps_per_connection, time_scale, mtu


@dataclass
class Job:
    spec: JobSpec
    lab: Lab
    directory: Path = field(init=False)
    pids: list[int] = field(default_factory=list)
    logs: list[JsonlTail] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.directory = self.lab.paths.jobs / self.spec.name

    def start(self) -> None:
        if self.directory.exists():
            raise TwinError(f"a collective job named {self.spec.name} already runs on lab {self.lab.name}",
                            hint="wait for it to finish, or `twin lab down` the lab")
        self.directory.mkdir(parents=True)
        share_with_ranks(self.directory, files=("store",))
        job_file = self.directory / "job.json"
        job_file.write_text(json.dumps({**asdict(self.spec), "directory": str(self.directory)}))
        for rank, nic in enumerate(self.spec.nics):
            argv = python_module("twin.collectives.worker", str(job_file), str(rank))
            spawned = self.lab.spawn_owned(f"job/{self.spec.name}/rank{rank}", argv,
                                           self.directory / f"rank-{rank}.log", node=nic.host)
            self.pids.append(spawned.pid)
            self.logs.append(JsonlTail(self.directory / f"rank-{rank}.jsonl"))

    def running(self) -> int:
        return sum(alive(pid) for pid in self.pids)

    def read(self) -> list[dict]:
        """New records of every rank since the last call."""
        return [record for log in self.logs for record in log.read()]

    def failure(self) -> str | None:
        """The tail of the first log of a rank that exited before writing `done`."""
        for rank, pid in enumerate(self.pids):
            if alive(pid):
                continue
            records = (self.directory / f"rank-{rank}.jsonl")
            if records.exists() and '"event": "done"' in records.read_text():
                continue
            log = self.directory / f"rank-{rank}.log"
            tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
            return f"rank {rank} ({self.spec.nics[rank].label}) exited: " + (" | ".join(tail) or "no output")
        return None

    def stop(self, grace_s: float = 3.0, keep_files: bool = False) -> None:
        terminate(self.pids, grace_s=grace_s)
        self.lab.forget(self.lab.owned("worker", f"job/{self.spec.name}/"))
        if not keep_files:
            shutil.rmtree(self.directory, ignore_errors=True)


def run_to_end(job: Job, timeout_s: float, on_record=None) -> list[dict]:
    """Start the job and wait for every rank to finish; every record of every rank, in order read."""
    records: list[dict] = []
    job.start()
    failed = True
    try:
        deadline = time.monotonic() + timeout_s
        while job.running():
            new = job.read()
            records += new
            for record in new:
                if on_record:
                    on_record(record)
            problem = job.failure()
            if problem:
                raise TwinError(f"collective {'/'.join(job.spec.ops)} failed: {problem}",
                                hint=f"rank logs: {job.directory}")
            if time.monotonic() > deadline:
                raise TwinError(f"collective {'/'.join(job.spec.ops)} did not finish within {timeout_s:.0f} s",
                                hint="smaller --sizes or fewer --iters, or check `twin lab status`")
            time.sleep(0.1)
        records += job.read()
        problem = job.failure()
        if problem:
            raise TwinError(f"collective {'/'.join(job.spec.ops)} failed: {problem}",
                            hint=f"rank logs: {job.directory}")
        failed = False
        return records
    finally:
        job.stop(keep_files=failed)  # a failed job's logs stay until `twin lab down`
