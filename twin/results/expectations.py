"""The `detectors:` and `expect:` sections of a scenario: schemas and checks against the
scenario (fault ids, workload names), run at load time like every other check."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from twin.detect.runner import BUILTINS

HANG_CAUSES = ("timeout", "peer_closed", "transport_error", "any")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DetectorSpec(_Strict):
    builtin: str | None = Field(None, description=f"a built-in detector: {', '.join(BUILTINS)}")
    command: list[str] | None = Field(None, description='an external tool, e.g. ["./my-detector", "--lab", "{lab}"]')
    name: str | None = Field(None, description="how the report names it")
    isolate: bool = Field(False, description="drain each switch-to-switch link it names (BGP shut on both "
                                             "ends); undrained when the fault clears")

    @model_validator(mode="after")
    def _one(self):
        if (self.builtin is None) == (self.command is None):
            raise ValueError("give exactly one of builtin or command")
        if self.builtin is not None and self.builtin not in BUILTINS:
            raise ValueError(f"unknown builtin detector {self.builtin!r}; built in: {', '.join(BUILTINS)}")
        if self.command is not None and not self.command:
            raise ValueError("command is empty")
        return self


class FaultWithin(_Strict):
    fault: str
    within_s: float = Field(gt=0)


class WorkloadWithin(_Strict):
    workload: str
    within_s: float = Field(gt=0)


class CollectiveLimit(_Strict):
    max_slowdown: float | None = Field(None, gt=0, description="no fault window slower than this")
    min_slowdown: float | None = Field(None, gt=0, description="a fault window at least this much slower "
                                                               "(the fault must hurt the job)")
    workload: str | None = None

    @model_validator(mode="after")
    def _a_limit(self):
        if self.max_slowdown is None and self.min_slowdown is None:
            raise ValueError("give max_slowdown, min_slowdown or both")
        return self


class WorkloadRef(_Strict):
    workload: str


class HangOf(_Strict):
    workload: str
    cause: str = Field("any", description="timeout | peer_closed | transport_error | any")

    @model_validator(mode="after")
    def _cause(self):
        if self.cause not in HANG_CAUSES:
            raise ValueError(f"cause {self.cause!r}: one of {', '.join(HANG_CAUSES)}")
        return self


class Expectation(_Strict):
    detect: FaultWithin | None = Field(None, description="a detector names the fault's link or node within_s")
    reroute: FaultWithin | None = Field(None, description="routing has finished changing within_s of onset")
    recover: WorkloadWithin | None = Field(None, description="the workload is back to healthy within_s of onset")
    collective: CollectiveLimit | None = Field(None, description="step time in fault windows vs healthy baseline")
    no_hang: bool | WorkloadRef | None = Field(None, description="no collective (or this workload's) hung; "
                                                                 "false: some collective did")
    hang: HangOf | None = Field(None, description="this workload hung, for this cause (a job that dies)")
    max_wrong_verdicts: int | None = Field(None, ge=0, description="verdicts naming no active fault (false "
                                                                   "positives), over every detector")

    @model_validator(mode="after")
    def _one(self):
        if sum(v is not None for v in self.model_dump().values()) != 1:
            raise ValueError("each entry is exactly one of detect, reroute, recover, collective, no_hang, hang, "
                             "max_wrong_verdicts")
        return self

    @property
    def kind(self) -> str:
        return next(k for k, v in self.model_dump().items() if v is not None)


def workload_names(workloads: list[dict]) -> dict[str, str]:
    """name -> kind: each workload is `<kind>-<index>`, and a kind used once also answers to its kind."""
    names = {f"{w.get('kind')}-{i}": w.get("kind") for i, w in enumerate(workloads)}
    kinds = [w.get("kind") for w in workloads]
    names |= {k: k for k in kinds if kinds.count(k) == 1}
    return names


def check(spec, fault_ids: set[str], problem) -> tuple[list[DetectorSpec], list[Expectation]]:
    detectors, expectations = [], []
    kinds = {w.get("kind") for w in spec.workloads}
    for number, detector in _valid(DetectorSpec, spec.detectors, "detectors", problem,
                                   "e.g. builtin: probe-localizer, or command: [./tool]"):
        if detector.builtin and "probes" not in kinds:
            problem(("detectors", number, "builtin"), f"{detector.builtin} needs the probe mesh",
                    "add a workload: - kind: probes")
        detectors.append(detector)
    names = workload_names(spec.workloads)
    for number, expectation in _valid(Expectation, spec.expect, "expect", problem, "see README, expectations"):
        target = getattr(expectation, expectation.kind)
        if expectation.kind in ("detect", "reroute") and target.fault not in fault_ids:
            problem(("expect", number, expectation.kind), f"no fault with id {target.fault!r}",
                    f"fault ids: {', '.join(sorted(fault_ids)) or 'none'}")
        if expectation.kind in ("detect", "max_wrong_verdicts") and not detectors:
            problem(("expect", number, expectation.kind), "no detector to grade",
                    "add detectors: - builtin: probe-localizer")
        workload = getattr(target, "workload", None)
        if workload is not None and workload not in names:
            problem(("expect", number, expectation.kind), f"no workload {workload!r}",
                    f"workloads: {', '.join(sorted(names)) or 'none'}")
        expectations.append(expectation)
    return detectors, expectations


def _valid(model, entries: list, section: str, problem, hint: str):
    """(index, validated entry) for each entry that validates; a problem for each that does not."""
    for number, entry in enumerate(entries):
        try:
            yield number, model.model_validate(entry)
        except ValidationError as exc:
            problem((section, number), _first(exc), hint)


def _first(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(x) for x in error["loc"])
    return (f"{where}: " if where else "") + error["msg"].removeprefix("Value error, ").lower()
