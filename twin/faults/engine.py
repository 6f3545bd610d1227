"""Inject, list and clear faults on a running lab. Every fault is recorded in the lab state
before it touches the machine, with what undoes it; clearing replays that record."""

from __future__ import annotations

import time
from typing import Any

import pydantic

from twin.errors import LabStateError, TwinError, closest
from twin.faults.base import COMMON_KEYS, FaultContext, Timing
from twin.faults.change import Change
from twin.faults.overlap import clash_with_active
from twin.faults.registry import FAULTS, get_kind
from twin.model.targets import TargetError
from twin.text import key_note, shown_name

CHANGE = Change.name


class FaultSpecError(TwinError):
    pass


def parse(entry: dict[str, Any]) -> tuple[Timing, Any]:
    """A fault entry (scenario file or CLI) -> (timing, kind params); errors name the key."""
    common = {k: v for k, v in entry.items() if k in COMMON_KEYS}
    messages, hints, timing, params = [], [], None, None
    try:
        timing = Timing.model_validate(common)
    except pydantic.ValidationError as exc:
        _describe(exc, Timing, messages, hints)
    name = entry.get("kind")
    if timing is not None:
        kind = get_kind(timing.kind)  # an unknown kind: its own error, with the valid ones
    else:  # the kind's own keys are checked too, so that one pass reports every problem
        kind = get_kind(name) if isinstance(name, str) and name in FAULTS else None
    rest = {k: v for k, v in entry.items() if k not in COMMON_KEYS}
    if kind is not None:
        try:
            params = kind.params.model_validate(rest)
        except pydantic.ValidationError as exc:
            _describe(exc, kind.params, messages, hints)
    if messages and not hints:
        hints.append("`twin fault kinds` lists each kind's keys; docs/formats.md says what they mean")
    if messages:
        raise FaultSpecError(f"{name if isinstance(name, str) else 'fault'}: " + "; ".join(messages),
                             hint="; ".join(dict.fromkeys(hints)) or None)
    return timing, params


def _describe(exc: pydantic.ValidationError, model, messages: list[str], hints: list[str]) -> None:
    """Every problem of the entry, unknown keys first (a typo explains a 'missing')."""
    valid = sorted(set(model.model_fields) | set(COMMON_KEYS))
    for err in sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden"):
        key = ".".join(str(p) for p in err["loc"]) or "fault"
        if err["type"] == "extra_forbidden":
            guess = closest(key, valid)
            messages.append(f"unknown key '{shown_name(key)}'")
            hints.append(key_note(key) + (f"did you mean '{guess}'? " if guess else "")
                         + f"valid keys: {', '.join(valid)}")
            continue
        field = model.model_fields.get(key)
        text = "required key is missing" if err["type"] == "missing" else err["msg"].removeprefix("Value error, ")
        messages.append(f"{key}: {text}")
        if field is not None and field.description:
            hints.append(f"{key}: {field.description}")


def targets(timing: Timing, params: Any, fabric) -> list[str]:
    """What the fault touches; resolving the names raises a TargetError for unknown ones."""
    return get_kind(timing.kind).targets(fabric, params)


def _on_this_machine(fabric, kind, targets: list[str]) -> None:
    """A split lab's share injects only where it runs: every node a fault touches is here, or, for
    a kind that acts on a link's ends one by one (`link_down`), one end of the link."""
    if not fabric.machine:
        return
    for target in targets:
        nodes = [name for name in (part.strip() for part in target.split("--")) if name in fabric.nodes]
        here = [fabric.runs_here(name) for name in nodes]
        if not (any(here) if kind.one_end_suffices else all(here)):
            away = [name for name in nodes if not fabric.runs_here(name)]
            raise TargetError(f"{kind.name} on {target} acts on {', '.join(away)}, not on this machine "
                              f"({fabric.name} is machine {fabric.machine} of lab {fabric.split_of})",
                              hint=f"inject it from the share of machine {fabric.machine_of(away[0])}: "
                                   f"twin fault inject {fabric.split_of}-m{fabric.machine_of(away[0])} ...")


def inject(ctx: FaultContext, timing: Timing, params: Any) -> dict:
    kind = get_kind(timing.kind)
    targets = kind.targets(ctx.lab.fabric, params)  # resolves names: errors before anything changes
    _on_this_machine(ctx.lab.fabric, kind, targets)
    problems = kind.check(ctx.lab.fabric, params, None)
    if problems:
        key, message, hint = problems[0]
        raise FaultSpecError(f"{timing.kind}: {key}: {message}", hint=hint)
    for other in ctx.lab.state.faults:
        if other["id"] == timing.id:
            raise LabStateError(f"a fault with id '{timing.id}' is already active",
                                hint=f"twin fault clear {ctx.lab.state.lab} {timing.id}")
        if CHANGE in (timing.kind, other["kind"]):
            continue  # a planned change's lines meet no fault's mechanism (run/plan.py lets them overlap)
        shared = clash_with_active(ctx.lab.fabric, tuple(targets), tuple(other["targets"]))
        if shared:
            raise LabStateError(f"fault '{timing.id}' overlaps active fault '{other['id']}' on "
                                f"{', '.join(sorted(shared))}",
                                hint="clear that fault first, or target something else")
    entry = {"id": timing.id, "kind": timing.kind, "params": params.model_dump(), "targets": targets,
             "seed": ctx.seed, "record": {}, "applied_at": time.time()}
    ctx.lab.state.faults.append(entry)
    ctx.lab.state.save()  # recorded before it acts, so teardown knows about it after a crash
    try:
        kind.apply(ctx, timing.id, params, entry["record"])
    except BaseException:
        try:
            kind.clear(ctx, timing.id, params, entry["record"])
        finally:
            ctx.lab.state.faults.remove(entry)
            ctx.lab.state.save()
        raise
    ctx.lab.state.save()
    return entry


def clear(ctx: FaultContext, fault_id: str) -> dict:
    entry = next((f for f in ctx.lab.state.faults if f["id"] == fault_id), None)
    if entry is None:
        raise LabStateError(f"no active fault '{fault_id}' on lab {ctx.lab.state.lab}",
                            hint="active: " + (", ".join(f["id"] for f in ctx.lab.state.faults) or "none"))
    kind = get_kind(entry["kind"])
    kind.clear(ctx, fault_id, kind.params(**entry["params"]), entry["record"])
    entry["cleared_at"] = time.time()
    ctx.lab.state.faults.remove(entry)
    ctx.lab.state.save()
    return entry


def clear_all(ctx: FaultContext) -> list[dict]:
    return [clear(ctx, f["id"]) for f in list(reversed(ctx.lab.state.faults))]


__all__ = ["FaultSpecError", "clear", "clear_all", "inject", "parse", "targets"]
