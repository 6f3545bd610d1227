"""change: a planned configuration change on one switch, as an operator pushes it during maintenance:
configuration lines sent to one of its FRR daemons (bgpd by default) in configure mode, and when
the change ends its undo lines. A scenario's `changes:` entries are this kind; a drill grades what
the change costs (the flows' loss in its window, routing's moves) with the same expectations as a
fault, so a drain, a timer change or a policy push is rehearsed on the twin before production.

The lines go to the daemon's own vty socket (lab/routing/vty.py), not through vtysh: the daemon runs as
the frr user and knows configuration commands only, so a line cannot start a shell or write a file
as root. Lines that would leave configuration mode or write the configuration are refused before
anything is sent. When the undo has run, the daemon's running configuration is compared with the
one before the change; what the undo left different is reported with the change (`undo_left`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from twin.faults.base import FaultContext, OnNode, Params
from twin.lab.routing import vty
from twin.lab.routing.frr import running_config
from twin.model.fabric import SWITCH_ROLES

# First words that leave configuration mode, write files or reach past the daemon's configuration.
REFUSED = ("end", "do", "write", "copy", "start-shell", "log", "enable", "password", "service", "line")


class ChangeParams(Params):
    node: str = Field(description="the switch changed")
    daemon: Literal["bgpd", "zebra", "bfdd"] = Field(
        "bgpd", description="the FRR daemon the lines go to: bgpd (BGP, route maps), zebra (interfaces), bfdd")
    config: list[str] = Field(min_length=1, max_length=200, description="configuration lines, as typed after "
                              "`configure terminal`, e.g. [router bgp 65101, bgp graceful-shutdown]")
    undo: list[str] = Field(min_length=1, max_length=200, description="the lines that take the change back, "
                            "sent when it ends, e.g. [router bgp 65101, no bgp graceful-shutdown]")

    @field_validator("config", "undo")
    @classmethod
    def _configuration_lines(cls, lines: list[str]) -> list[str]:
        for line in lines:
            if not line.strip() or len(line) > 512 or any(c in line for c in "\n\r\0"):
                raise ValueError(f"{line[:40]!r}: one non-empty line of at most 512 characters each")
            first = line.split()[0].lower()
            if first in REFUSED:
                raise ValueError(f"{line!r}: '{first}' leaves configuration mode, writes a file or reaches past "
                                 "the daemon's configuration; a change holds configuration lines only")
        return lines


class Change(OnNode):
    name = "change"
    params = ChangeParams
    training_level = None
    roles = SWITCH_ROLES

    def apply(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        record["before"] = running_config(ctx.lab, params.node, params.daemon)
        vty.run(_socket(ctx, params), ["configure terminal", *params.config], what=f"{params.daemon} on {params.node}")

    def clear(self, ctx: FaultContext, fault_id: str, params, record: dict) -> None:
        vty.run(_socket(ctx, params), ["configure terminal", *params.undo], what=f"{params.daemon} on {params.node}")
        if "before" in record:
            after = running_config(ctx.lab, params.node, params.daemon)
            before = record["before"]
            left = [f"-{line}" for line in before if line not in after] + \
                   [f"+{line}" for line in after if line not in before]
            record["report"] = {"undo_left": left}


def _socket(ctx: FaultContext, params):
    return ctx.lab.state.node_dir(params.node) / f"{params.daemon}.vty"
