"""timeline.png of a run: what the workloads saw over time, with the faults on it."""

from __future__ import annotations

from pathlib import Path

from twin.results import workloads
from twin.results.record import RunFolder
from twin.results.report import Report


def write_timeline(run: RunFolder, report: Report, path: Path) -> None:
    """Loss, delay, probe loss, step time, RoCE resends, the rate DCQCN allowed and PFC pauses over
    the run; faults shaded, route changes and BGP/BFD downs marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = run.records
    flows = [r for r in records if r["kind"] == "flow"]
    times = sorted({r["t"] for r in flows})
    loss = [sum(r["sent"] - r["received"] for r in flows if r["t"] == t)
            / max(1, sum(r["sent"] for r in flows if r["t"] == t)) * 100 for t in times]
    delay = [max(r["max_delay_ms"] for r in flows if r["t"] == t) for t in times]
    probe_rows = [r for r in records if r["kind"] == "probe"]
    steps = workloads.step_series(records)
    paused_t, paused_n = workloads.paused_series(records)
    show_pfc = any(paused_n)
    resent = {w: series for w, series in workloads.retransmission_series(records).items() if any(series[1])}
    rates = workloads.rate_series(records)
    panels = 2 * bool(flows) + bool(probe_rows) + bool(steps) + show_pfc + bool(resent) + bool(rates) or 1
    fig, axes = plt.subplots(panels, 1, figsize=(11, 2.75 * panels + 0.5), sharex=True, squeeze=False)
    axes = list(axes[:, 0])
    top, bottom = axes[0], axes[-1]
    free = iter(axes)
    if flows:
        ax = next(free)
        ax.plot(times, loss, color="#d62728", drawstyle="steps-post")
        ax.set_ylabel("flow loss %")
        ax = next(free)
        ax.plot(times, delay, color="#1f77b4", drawstyle="steps-post")
        ax.set_ylabel("flow max delay ms")
    if probe_rows:
        ax = next(free)
        ax.plot([r["t"] for r in probe_rows], [r["loss_pct"] or 0 for r in probe_rows], color="#ff7f0e",
                drawstyle="steps-post")
        ax.set_ylabel("probe loss %")
    if steps:
        ax = next(free)
        for workload, (ts, ys) in steps.items():
            ax.plot(ts, ys, marker=".", linestyle="none", label=workload)
        for c in report.collectives.values():
            if c.first_hang_s is not None:
                ax.axvspan(c.first_hang_s, c.recovered_s or report.duration_s, color="#d62728", alpha=0.15)
        ax.set_ylabel("step s (slowest rank)")
        ax.legend(fontsize=7, loc="upper left", title="red: hung until recovered", title_fontsize=7)
    if resent:  # what go-back-N resent: the price a RoCE job pays for loss
        ax = next(free)
        for workload, (ts, ys) in resent.items():
            ax.bar(ts, ys, width=0.45, align="edge", label=workload)
        ax.set_ylabel("RoCE resent MB / 0.5 s")
        ax.legend(fontsize=7, loc="upper left")
    if rates:  # DCQCN pacing: the sending rate its CNPs left the ranks' QPs
        ax = next(free)
        for workload, (ts, ys) in rates.items():
            ax.plot(ts, ys, drawstyle="steps-post", label=workload)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("RoCE rate / line (DCQCN)")
        ax.legend(fontsize=7, loc="lower left")
    if show_pfc:  # congestion spreading: how many link directions PFC holds
        ax = next(free)
        ax.plot(paused_t, paused_n, color="#8c564b", drawstyle="steps-post")
        ax.set_ylabel("directions paused (PFC)")
    bottom.set_xlabel("seconds since scenario start")
    for fault in report.faults:
        start, end = fault.active(report.duration_s)
        for ax in axes:
            ax.axvspan(start, end, color="#ffbb78", alpha=0.35)
        top.annotate(f"{fault.id} ({fault.kind})", (start, 1.02), xycoords=("data", "axes fraction"), fontsize=8)
    for r in records:
        if r["kind"] == "route":
            top.axvline(r["t"], color="#7f7f7f", linewidth=0.4, alpha=0.5)
        elif r["kind"] in ("bgp", "bfd") and r["state"] == "down":
            top.axvline(r["t"], color="#9467bd", linewidth=0.8, linestyle="--")
    top.set_title(f"{report.scenario} on {report.lab}: grey = kernel route changes, "
                  "dashed = BGP/BFD down, shaded = fault", fontsize=9, pad=16)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
