"""Line-rate shaping of every link direction: HTB root 1: with one class 1:10 at the link rate.

HTB (not TBF) so that later faults can hold a direction by lowering the class
rate (PFC-like pause) and restore it exactly. The kernel here has no netem.
"""

from __future__ import annotations

from pyroute2 import IPRoute

ROOT_HANDLE = 0x10000  # 1:
CLASS_HANDLE = 0x10010  # 1:10


def shape(ipr: IPRoute, index: int, rate_bps: int) -> None:
    ipr.tc("add", "htb", index, handle=ROOT_HANDLE, default=0x10)
    set_class_rate(ipr, index, rate_bps, command="add-class")


def set_class_rate(ipr: IPRoute, index: int, rate_bps: int, command: str = "change-class") -> None:
    rate = f"{rate_bps}bit"
    ipr.tc(command, "htb", index, handle=CLASS_HANDLE, parent=ROOT_HANDLE, rate=rate, ceil=rate)


def shaped_rate_bps(ipr: IPRoute, index: int) -> int | None:
    """The configured class rate, read back from the kernel."""
    for cls in ipr.get_classes(index=index):
        if cls["handle"] == CLASS_HANDLE:
            options = cls.get_attr("TCA_OPTIONS")
            params = options.get_attr("TCA_HTB_PARMS") if options else None
            if params:
                rate64 = options.get_attr("TCA_HTB_RATE64")
                return (rate64 or params["rate"]) * 8
    return None
