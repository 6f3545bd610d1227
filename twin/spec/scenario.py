"""The scenario file's document (docs/formats.md): its top-level keys. What each entry of
`workloads`, `faults`, `detectors` and `expect` holds belongs to the kind it names; run/plan.py
checks those against their registries and the lab."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from twin.names import LAB_NAME_PATTERN

# The seed reaches nftables' jhash, whose seed is 32 bits: a larger one was refused mid-run.
MAX_SEED = (1 << 32) - 1


class ScenarioSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    name: str = Field(pattern=LAB_NAME_PATTERN.replace("{0,11}", "{0,39}"),
                      description="lowercase letters, digits and -, e.g. silent-drop")
    lab: str = Field(description="a lab name from labs/, or a path to a lab file (relative to the scenario's folder)")
    duration_s: float = Field(gt=0, le=3600, description="seconds the scenario runs")
    seed: int = Field(1, ge=0, le=MAX_SEED, description="every random choice derives from it, 0 to 4294967295")
    workloads: list[dict[str, Any]] = Field(default_factory=list,
                                            description="traffic to run, each a mapping, e.g. - kind: flows")
    faults: list[dict[str, Any]] = Field(default_factory=list, description="faults on the timeline, each a mapping, "
                                         "e.g. - {id: bad-optic, kind: silent_drop, link: a -- b}")
    changes: list[dict[str, Any]] = Field(default_factory=list, description="planned configuration changes on "
                                          "the timeline, each a mapping, e.g. - {id: drain, node: spine-r1-s1, "
                                          "at_s: 10, config: [...], undo: [...]}")
    detectors: list[dict[str, Any]] = Field(default_factory=list, description="detection tools to grade, each a "
                                            "mapping: - builtin: probe-likelihood, or - command: [./tool]")
    expect: list[dict[str, Any]] = Field(default_factory=list, description="expectations to grade")
    telemetry_ms: int = Field(100, ge=0, le=60000,
                              description="counter sampling period into metrics.jsonl; 0 = off")
