"""Every fault kind, in one list. A new kind is a module in faults/ (its params, targets, apply,
clear; base.py says what each must have) and one line here; help text, training pools, the
scenario check and the runbook test read the registry."""

from __future__ import annotations

from twin.faults import (
    bgp_down,
    bitflip,
    blackhole,
    change,
    ecmp_width,
    ecn_thresholds,
    flap,
    hash_policy,
    link_down,
    lossy_class,
    miswire,
    mtu_mismatch,
    peer_mismatch,
    pfc_pause,
    pfc_storm,
    rank_crash,
    rank_hang,
    route_filter,
    silent_drop,
    slow_compute,
    slow_node,
    switch_down,
)
from twin.faults.base import FaultKind
from twin.registry import Registry

FAULTS: Registry[FaultKind] = Registry("fault kind")
for _kind in (bgp_down.BgpDown(), bitflip.Bitflip(), blackhole.Blackhole(), flap.Flap(), link_down.LinkDown(),
              pfc_pause.PfcPause(), pfc_storm.PfcStorm(), silent_drop.SilentDrop(), slow_node.SlowNode(),
              switch_down.SwitchDown(),
              # misconfiguration (issue 31): 90 % of the incidents of the fabrics we twin
              ecmp_width.EcmpWidth(), ecn_thresholds.EcnThresholds(), hash_policy.HashPolicy(),
              lossy_class.LossyClass(), mtu_mismatch.MtuMismatch(), peer_mismatch.PeerMismatch(),
              route_filter.RouteFilter(),
              # cabling
              miswire.Miswire(),
              # planned: a scenario's `changes:` (a maintenance rehearsed)
              change.Change(),
              # outside the network: a "network timeout" that is a GPU
              rank_hang.RankHang(), rank_crash.RankCrash(), slow_compute.SlowCompute()):
    FAULTS.add(_kind.name, _kind)


def get_kind(name: str) -> FaultKind:
    return FAULTS.get(name)


def kinds() -> list[str]:
    return FAULTS.names()
