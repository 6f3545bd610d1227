"""Start the ranks of one collective job in the host namespaces, follow them, end them.

Each rank is a process recorded in the lab state (kind `worker`) before it starts; its
command line names the job file inside the lab's run directory, which is how `twin lab
down` recognises it as the lab's own. Ranks are ended by pid, never by name.

On a namespace lab the ranks are forked by one process per job that imported torch once
(collectives/forkserver.py); a container's ranks are started in the container, each its own
`python -m twin.collectives.worker`.

A rank a fault crashed (`rank_crash`: its control file says so) is not the job failing: the
launcher holds it down while the fault lasts and starts it again once the fault is cleared, as an
elastic launcher (torchrun's agent) restarts a failed worker; the new process rejoins its peers.
"""

from __future__ import annotations

import json
import select
import shutil
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path

from twin.collectives.control import asked, control_file
from twin.errors import TwinError
from twin.events import JsonlTail
from twin.lab.handle import Lab, Spawned, python_module
from twin.lab.identity import share_with_ranks
from twin.lab.state import Resource
from twin.model.nics import Nic
from twin.procs import alive, reap, terminate

# How long the fork server may take to import torch before the job is given up (2-3 s alone; 16
# ranks' worth of other work may share the two cores).
SERVER_READY_S = 60.0


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
    # leaf -> leaf -> switches between (model/nics.py switches_between): how far a gloo rank's TCP
    # path discovery sends (collectives/tcp_state.py); without it, to the first switch only
    switches: dict = field(default_factory=dict)


@dataclass
class Job:
    spec: JobSpec
    lab: Lab
    directory: Path = field(init=False)
    pids: list[int] = field(default_factory=list)
    logs: list[JsonlTail] = field(default_factory=list)
    down: set[int] = field(default_factory=set)  # ranks a fault crashed, not yet restarted
    server: Spawned | None = None  # the fork server (namespace labs)

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
        try:
            if self.lab.runtime.kind == "netns":
                self._start_server(job_file)
            for rank in range(len(self.spec.nics)):
                self.pids.append(self._spawn(rank))
                self.logs.append(JsonlTail(self.directory / f"rank-{rank}.jsonl"))
        except TwinError:
            self.stop(keep_files=True)  # the ranks started so far; the logs say why
            raise

    def _start_server(self, job_file: Path) -> None:
        self.server = self.lab.spawn_owned(f"job/{self.spec.name}/server",
                                           python_module("twin.collectives.forkserver", str(job_file)),
                                           self.directory / "server.log", pipe_stdout=True, pipe_stdin=True)
        if self._server_line(SERVER_READY_S) != "ready":
            raise TwinError(f"the ranks' fork server of job {self.spec.name} did not start: "
                            + _log_tail(self.directory / "server.log"),
                            hint=f"its log: {self.directory / 'server.log'}")

    def _server_line(self, timeout_s: float) -> str:
        """The server's next line; "" if it ended or said nothing within timeout_s. (It says one line
        per request, so none waits in the reader's buffer where select would not see it.)"""
        stdout = self.server.proc.stdout
        if not select.select([stdout], [], [], timeout_s)[0]:
            return ""
        return stdout.readline().strip()

    def _spawn(self, rank: int, *extra: str) -> int:
        log = self.directory / f"rank-{rank}.log"
        node = self.spec.nics[rank].host
        if self.server is None:
            argv = python_module("twin.collectives.worker", str(self.directory / "job.json"), str(rank), *extra)
            return self.lab.spawn_owned(self._resource(rank), argv, log, node=node).pid
        resource = self.lab.state.record(Resource(kind="worker", name=self._resource(rank), node=node))
        self.server.proc.stdin.write(" ".join([str(rank), self.lab.runtime.netns_path(node), str(log), *extra]) + "\n")
        self.server.proc.stdin.flush()
        answer = self._server_line(SERVER_READY_S)
        if not answer.isdigit():
            raise TwinError(f"the ranks' fork server of job {self.spec.name} did not start rank {rank}",
                            hint=f"its log: {self.directory / 'server.log'}")
        resource.pid = int(answer)
        self.lab.state.save()
        return resource.pid

    def _resource(self, rank: int) -> str:
        return f"job/{self.spec.name}/rank{rank}"

    def _crash_asked(self, rank: int) -> bool:
        """Whether a fault's control file (faults/ranks.py) tells this rank to crash."""
        return bool(asked(control_file(self.directory, rank)).get("crash"))

    def supervise(self) -> Iterator[tuple[str, int]]:
        """Ranks a fault crashed (`crashed`, once each) and, once the fault is cleared, started again
        to rejoin the job (`restarted`)."""
        for rank, pid in enumerate(self.pids):
            if alive(pid) or self._finished(rank):
                continue
            if self._crash_asked(rank):
                if rank not in self.down:
                    self.down.add(rank)
                    yield "crashed", rank
            elif rank in self.down:
                self.lab.forget([r for r in self.lab.owned("worker", self._resource(rank))
                                 if r.name == self._resource(rank)])
                self.pids[rank] = self._spawn(rank, "--rejoin")
                reap(pid)  # only now: until its record was gone, its pid must not be reused
                self.down.discard(rank)
                yield "restarted", rank

    def _finished(self, rank: int) -> bool:
        records = self.directory / f"rank-{rank}.jsonl"
        return records.exists() and '"event": "done"' in records.read_text()

    def running(self) -> int:
        return sum(alive(pid) for pid in self.pids)

    def read(self) -> list[dict]:
        """New records of every rank since the last call."""
        return [record for log in self.logs for record in log.read()]

    def failure(self) -> str | None:
        """The tail of the first log of a rank that exited before writing `done`."""
        for rank, pid in enumerate(self.pids):
            if alive(pid) or rank in self.down or self._crash_asked(rank) or self._finished(rank):
                continue
            log = self.directory / f"rank-{rank}.log"
            return f"rank {rank} ({self.spec.nics[rank].label}) exited: " + _log_tail(log)
        return None

    def stop(self, grace_s: float = 3.0, keep_files: bool = False) -> None:
        terminate(self.pids, grace_s=grace_s)
        if self.server is not None:  # after the ranks: they end with it (forkserver.py)
            with suppress(OSError):
                self.server.proc.stdin.close()
            terminate([self.server.pid])
        self.lab.forget(self.lab.owned("worker", f"job/{self.spec.name}/"))
        if not keep_files:
            shutil.rmtree(self.directory, ignore_errors=True)


def _log_tail(log: Path) -> str:
    """A process's last three lines of output, on one line."""
    tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
    return " | ".join(tail) or "no output"


def run_to_end(job: Job, timeout_s: float, on_record=None) -> list[dict]:
    """Start the job and wait for every rank to finish; every record of every rank, in order read."""
    records: list[dict] = []
    job.start()
    failed = True
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            running = job.running()  # before reading: what a rank wrote before it ended is read below
            new = job.read()
            records += new
            for record in new:
                if on_record:
                    on_record(record)
            problem = job.failure()
            if problem:
                raise TwinError(f"collective {'/'.join(job.spec.ops)} failed: {problem}",
                                hint=f"rank logs: {job.directory}")
            if not running:
                break
            if time.monotonic() > deadline:
                raise TwinError(f"collective {'/'.join(job.spec.ops)} did not finish within {timeout_s:.0f} s",
                                hint="smaller --sizes or fewer --iters, or check `twin lab status`")
            time.sleep(0.1)
        failed = False
        return records
    finally:
        job.stop(keep_files=failed)  # a failed job's logs stay until `twin lab down`
