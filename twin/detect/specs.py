"""The `detectors:` section of a scenario: a built-in detector or an operator's command."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from twin.detect.builtins import BUILTINS

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$"  # it names a log file and report entries


class DetectorSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    builtin: str | None = Field(None, description=f"a built-in detector: {', '.join(BUILTINS.names())}")
    command: list[str] | None = Field(None, description='an external tool, e.g. ["./my-detector", "--lab", "{lab}"]')
    name: str | None = Field(None, pattern=NAME_PATTERN, description="how the report names it")
    isolate: bool = Field(False, description="drain each switch-to-switch link it names (BGP shut on both "
                                             "ends); undrained when the fault clears")
    ready_within_s: float | None = Field(
        None, gt=0, le=300, description="a command that needs time to start watching (a collector opening its "
        "subscriptions): started before the scenario's clock, which waits up to this long for its "
        '{"ready": true} line; its verdicts are timed when received')

    @model_validator(mode="after")
    def _one(self):
        if (self.builtin is None) == (self.command is None):
            raise ValueError("give exactly one of builtin or command")
        if self.builtin is not None and self.builtin not in BUILTINS:
            raise ValueError(f"unknown builtin detector {self.builtin!r}; built in: {', '.join(BUILTINS.names())}")
        if self.command is not None and not self.command:
            raise ValueError("command is empty")
        if self.ready_within_s is not None and self.command is None:
            raise ValueError("ready_within_s is for a command: built-in detectors watch from the start")
        return self

    def label(self, number: int) -> str:
        """How events and the report name the detector (number: its place in the scenario)."""
        return self.name or self.builtin or f"external-{number}"
