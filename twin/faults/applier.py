"""Faults applied and cleared by a process of their own, on the run's timeline.

A run's process has many threads (probe follower, route monitor, fabric watch, sampler) and one
interpreter lock. On a busy fabric they hold it while the timeline's thread waits for it, to wake
and at every netlink reply it parses: in the pod128 drill a link_down took 12.6 s to apply and a
silent drop 10.8 s, against 0.16 s and 0.14 s on the same lab at rest; with only the fault engine
moved out, the run's own thread still woke 2.2 s late for a fault. So this process keeps the
schedule itself: it is given the run's clock and every step, sleeps until each, applies or clears
it at the timeline's priority, and reports what it did and when; the run records the reports as
they come. The lab owns the process (its state records it, teardown ends it by pid); it exits when
its input closes.

    python -m twin.faults.applier <lab> <seed>

It says {"ready": true} once it has the lab open. Requests, one JSON object per line on stdin:
    {"op": "inject", "timing": {...}, "params": {...}}  |  {"op": "clear", "id": ...}
                                  -> {"entry": the engine's record} or {"error", "hint"}
    {"op": "schedule", "t0": monotonic clock's zero, "steps": [{"at_s", "op": "apply"|"clear",
     "timing", "params"}, ...]}  -> one {"step": n, "actual_s", "took_s", "wall", "entry"|"error"|
                                    "skipped"} per step as it is done, then {"done": true}
    {"op": "stop"}                -> ends a schedule after its current step: {"done": true}
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from typing import Any

from twin.errors import TwinError
from twin.faults import engine
from twin.faults.base import FaultContext, Timing
from twin.faults.registry import get_kind
from twin.lab.handle import Lab, python_module
from twin.procs import URGENT_NICE, set_priority, terminate

GONE = {"error": "the fault applier ended unexpectedly", "gone": True}
# Longer than any fault step takes (a switch's restart waiting for BGP at pod128 takes tens of
# seconds): a step that never returns must not hold the run's clean-up for ever.
STEP_LIMIT_S = 300.0


class FaultApplier:
    """The run's side. inject/clear: at once, as twin.faults.engine's; schedule/done/stop: a
    timeline the process keeps."""

    def __init__(self, lab: Lab, seed: int):
        self.lab = lab
        self.log = lab.paths.faults / "applier.log"
        self._spawned = lab.spawn_owned(f"faults/applier-{os.getpid()}",
                                        python_module("twin.faults.applier", lab.name, str(seed)), self.log,
                                        kind="agent", pipe_stdout=True, pipe_stdin=True)
        self._replies: queue.Queue[dict] = queue.Queue()
        self._scheduled = self._ready = False
        threading.Thread(target=self._read, name="fault-applier-replies", daemon=True).start()

    @property
    def pid(self) -> int:
        return self._spawned.pid

    def inject(self, timing: Timing, params: Any) -> dict:
        return self._entry(self._ask({"op": "inject", "timing": timing.model_dump(), "params": params.model_dump()}))

    def clear(self, fault_id: str) -> dict:
        return self._entry(self._ask({"op": "clear", "id": fault_id}))

    def schedule(self, t0: float, steps: list[dict]) -> None:
        """Steps in the order to take them: {"at_s", "op": "apply" (with "timing", "params") or
        "clear" (with "id")}; at_s counts from the monotonic time t0."""
        self._send({"op": "schedule", "t0": t0, "steps": steps})
        self._scheduled = True

    def done(self, timeout_s: float) -> dict | None:
        """The report of the next step done within timeout_s, or None."""
        try:
            reply = self._replies.get(timeout=timeout_s)
        except queue.Empty:
            return None
        return self._report(reply)

    def stop(self) -> list[dict]:
        """End the schedule after its current step; the reports not yet taken."""
        if not self._scheduled:
            return []
        try:
            self._send({"op": "stop"})
        except TwinError:  # it has ended: what it reported before is still in the queue
            pass
        reports = []
        while True:
            reply = self._reply()
            if reply.get("done") or reply.get("gone"):
                self._scheduled = False
                return reports
            reports.append(self._report(reply))

    def close(self) -> None:
        proc = self._spawned.proc
        try:
            proc.stdin.close()
            proc.wait(timeout=10)
        except (OSError, ValueError):
            pass
        except Exception:  # noqa: BLE001 - stuck: ended by pid like any process of the lab
            terminate([proc.pid], grace_s=2.0)
        self.lab.forget([self._spawned.resource])

    # --- the pipe ----------------------------------------------------------------------------
    def _read(self) -> None:
        for line in self._spawned.proc.stdout:
            self._replies.put(json.loads(line))
        self._replies.put(GONE)

    def ready(self) -> None:
        """Wait until the process has its lab open (a schedule sent earlier would start late)."""
        if not self._ready:
            reply = self._reply()
            if reply.get("gone"):
                raise TwinError(reply["error"], hint=f"see {self.log}")
            self._ready = True

    def _send(self, request: dict) -> None:
        self.ready()
        try:
            self._spawned.proc.stdin.write(json.dumps(request) + "\n")
            self._spawned.proc.stdin.flush()
        except (OSError, ValueError):
            raise TwinError(GONE["error"], hint=f"see {self.log}") from None

    def _ask(self, request: dict) -> dict:
        if self._scheduled:  # its reports would be taken for this reply
            raise RuntimeError("the fault applier keeps a schedule: stop() it first")
        self._send(request)
        return self._reply()

    def _reply(self) -> dict:
        """The next reply; a process silent for STEP_LIMIT_S is ended by its pid (the run starts
        another to clear what is left) and counts as gone."""
        try:
            return self._replies.get(timeout=STEP_LIMIT_S)
        except queue.Empty:
            terminate([self.pid], grace_s=2.0)
            return {**GONE, "error": f"the fault applier did not answer in {STEP_LIMIT_S:g} s and was ended"}

    def _report(self, reply: dict) -> dict:
        if reply.get("gone"):
            raise TwinError(reply["error"], hint=f"see {self.log}")
        if reply.get("done"):
            self._scheduled = False
        self.lab.state.refresh()  # the process changed the state on disk: samplers read its faults
        return reply

    def _entry(self, reply: dict) -> dict:
        self._report(reply)
        if "error" in reply:
            raise TwinError(reply["error"], hint=reply.get("hint"))
        return reply["entry"]


# --- the process ------------------------------------------------------------------------------
class _Server:
    def __init__(self, ctx: FaultContext, replies):
        self.ctx, self.replies = ctx, replies
        self.requests: queue.Queue[dict | None] = queue.Queue()

    def serve(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()
        while (request := self.requests.get()) is not None:
            if request["op"] == "schedule":
                self._schedule(request["t0"], request["steps"])
            elif request["op"] != "stop":  # a stop that came after its schedule ended: nothing to stop
                self._reply(self._at_once(request))

    def _read(self) -> None:
        for line in sys.stdin:
            self.requests.put(json.loads(line))
        self.requests.put(None)

    def _reply(self, reply: dict) -> None:
        self.replies.write(json.dumps(reply, default=str) + "\n")
        self.replies.flush()

    def _at_once(self, request: dict) -> dict:
        try:
            self.ctx.lab.state.refresh()  # the run (drains) or a user (`twin fault inject`) changed it
            if request["op"] == "inject":
                timing = Timing(**request["timing"])
                return {"entry": engine.inject(self.ctx, timing, get_kind(timing.kind).params(**request["params"]))}
            return {"entry": engine.clear(self.ctx, request["id"])}
        except TwinError as exc:
            return {"error": exc.message, "hint": exc.hint}
        except Exception as exc:  # noqa: BLE001 - reported to the run, which records it and goes on
            return {"error": f"{type(exc).__name__}: {exc}"}

    def _schedule(self, t0: float, steps: list[dict]) -> None:
        failed: set[str] = set()
        for n, step in enumerate(steps):
            if self._stopped_before(t0 + step["at_s"]):
                break
            fault_id = step["timing"]["id"] if step["op"] == "apply" else step["id"]
            if step["op"] == "clear" and fault_id in failed:  # never applied: nothing to clear
                self._reply({"step": n, "skipped": True})
                continue
            started, wall = time.monotonic(), time.time()
            reply = self._at_once({**step, "op": "inject" if step["op"] == "apply" else "clear"})
            took = time.monotonic() - started
            if "error" in reply:
                failed.add(fault_id)
            if not self.ctx.lab.in_training:  # a training session's log must not say when, or what
                print(f"{step['op']} {fault_id} at {started - t0:.3f} s (scheduled {step['at_s']}) took {took:.3f} s",
                      file=sys.stderr, flush=True)
            self._reply({"step": n, "actual_s": round(started - t0, 4), "took_s": round(took, 4),
                         "wall": round(wall, 3), **reply})
        self._reply({"done": True})

    def _stopped_before(self, due: float) -> bool:
        """Wait until `due` (monotonic); True if the run said stop first (or went away)."""
        while True:
            left = due - time.monotonic()
            try:
                request = self.requests.get(timeout=left) if left > 0 else self.requests.get_nowait()
            except queue.Empty:
                if left <= 0:
                    return False
                continue
            if request is None:
                self.requests.put(None)  # and the server ends after this schedule
            return True  # stop (the run sends nothing else while a schedule runs)


def main() -> None:
    lab_name, seed = sys.argv[1], int(sys.argv[2])
    set_priority(URGENT_NICE)
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything a fault kind prints goes to the log, never into the replies
    server = _Server(FaultContext(Lab.open(lab_name), seed=seed), replies)
    server._reply({"ready": True})
    server.serve()


if __name__ == "__main__":
    main()
