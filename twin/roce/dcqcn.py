"""DCQCN (Zhu et al., SIGCOMM 2015), the congestion control RoCE NICs run: pure, a clock and events
in, a sending rate out; nic.py paces each QP's packets at that rate.

Notification point (the receiving NIC): a data packet marked Congestion Experienced by a switch
queue is answered with a congestion notification packet (CNP) to the sender's QP, at most one
per QP every `cnp_interval_s`.

Reaction point (the sending NIC), per QP, starting at line rate:
- a CNP: target rate Rt = Rc if the rate rose since the last cut (as ConnectX NICs clamp it:
  `clamp_tgt_rate` 0, `clamp_tgt_rate_after_time_inc` 1; the paper sets Rt = Rc on every cut),
  current rate Rc = Rc (1 - alpha / 2) (never below half, nor below the minimum rate),
  alpha = (1 - g) alpha + g; the increase stages start again. A burst of cuts before the queue
  drains so leaves the target where the first cut found the rate, and fast recovery goes back
  toward it, not toward the lowest rate of the burst;
- every `alpha_period_s`: alpha = (1 - g) alpha, when no CNP arrived in it;
- every `increase_timer_s` and every `byte_counter` bytes sent without a CNP: a rate increase,
  counted per stage (timer and byte counter separately). While both stages are below
  `fast_recovery_steps` (F): fast recovery, Rc = (Rt + Rc) / 2; once either reaches F: additive
  increase, Rt += R_AI first; once both exceed F: hyper increase, Rt += R_HAI first; Rt never
  above line rate.

The parameters are the paper's, tuned on 40 Gbit/s NICs (`REFERENCE_BPS`). The twin keeps what
its PFC thresholds keep (model/buffers.py): bytes at line rate. A timer of 55 us at 40 Gbit/s is
275 KB of line; at the twin's 200 Mbit/s, 275 KB take 11 ms. So every time is stretched by
REFERENCE_BPS / line rate, byte counts stay, and rates are shares of the line rate.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

REFERENCE_BPS = 40e9


@dataclass(frozen=True)
class DcqcnParams:
    """The paper's values at its 40 Gbit/s NICs; `for_line_rate` scales them to a twin's link."""
    g: float = 1 / 256
    alpha_period_s: float = 55e-6  # K
    cnp_interval_s: float = 50e-6  # N, the notification point's
    increase_timer_s: float = 55e-6  # T
    byte_counter: int = 10 * 1024 * 1024  # B
    fast_recovery_steps: int = 5  # F
    ai_share: float = 40e6 / REFERENCE_BPS  # R_AI, 40 Mbit/s
    hai_share: float = 400e6 / REFERENCE_BPS  # R_HAI, ten times R_AI
    min_share: float = 0.001  # the slowest a QP is cut to
    most_cut: float = 0.5  # one CNP cuts the rate by at most half (NICs' min_dec_fac)

    def for_line_rate(self, line_bps: float) -> ScaledParams:
        stretch = REFERENCE_BPS / line_bps
        return ScaledParams(line_bps=line_bps, g=self.g, alpha_period_s=self.alpha_period_s * stretch,
                            cnp_interval_s=self.cnp_interval_s * stretch,
                            increase_timer_s=self.increase_timer_s * stretch, byte_counter=self.byte_counter,
                            fast_recovery_steps=self.fast_recovery_steps, ai_bps=self.ai_share * line_bps,
                            hai_bps=self.hai_share * line_bps, min_bps=self.min_share * line_bps,
                            most_cut=self.most_cut)


@dataclass(frozen=True)
class ScaledParams:
    line_bps: float
    g: float
    alpha_period_s: float
    cnp_interval_s: float
    increase_timer_s: float
    byte_counter: int
    fast_recovery_steps: int
    ai_bps: float
    hai_bps: float
    min_bps: float
    most_cut: float

    def spanning(self, ports: int) -> ScaledParams:
        """For a QP that sprays over `ports` ports of its NIC (a multipath QP of a dual-port NIC):
        it may send at their summed line rate, and recovers toward it in steps scaled alike. The
        timers stay the port's. With one port's rate it ran at one port's share of the NIC once a
        CNP had cut it (recovery stops at line_bps), though its packets arrived on both."""
        return replace(self, line_bps=self.line_bps * ports, ai_bps=self.ai_bps * ports,
                       hai_bps=self.hai_bps * ports, min_bps=self.min_bps * ports)


@dataclass
class ReactionPoint:
    """One QP's sending rate. `now` is any monotonic clock, in seconds."""
    params: ScaledParams
    now: float
    rate_bps: float = field(init=False)
    target_bps: float = field(init=False)
    alpha: float = 1.0
    cnps: int = 0
    cuts: int = 0

    def __post_init__(self):
        self.rate_bps = self.target_bps = self.params.line_bps
        self._cnp_in_period = False
        self._next_alpha = self.now + self.params.alpha_period_s
        self._next_increase = self.now + self.params.increase_timer_s
        self._bytes = 0
        self._timer_stage = self._byte_stage = 0

    def on_cnp(self, now: float) -> None:
        self.advance(now)
        p = self.params
        self.cnps += 1
        self.cuts += 1
        if self._timer_stage or self._byte_stage or self.cuts == 1:
            self.target_bps = self.rate_bps
        cut = min(self.alpha / 2, p.most_cut)
        self.rate_bps = max(p.min_bps, self.rate_bps * (1 - cut))
        self.alpha = (1 - p.g) * self.alpha + p.g
        self._cnp_in_period = True
        self._timer_stage = self._byte_stage = self._bytes = 0
        self._next_increase = now + p.increase_timer_s

    def on_sent(self, size: int, now: float) -> None:
        """Bytes put on the wire: the byte counter's stage."""
        self.advance(now)
        self._bytes += size
        while self._bytes >= self.params.byte_counter:
            self._bytes -= self.params.byte_counter
            self._byte_stage += 1
            self._increase()

    def advance(self, now: float) -> None:
        """Run the alpha and rate-increase timers up to `now`."""
        p = self.params
        while self._next_alpha <= now:
            if not self._cnp_in_period:
                self.alpha *= 1 - p.g
            self._cnp_in_period = False
            self._next_alpha += p.alpha_period_s
        while self._next_increase <= now:
            self._timer_stage += 1
            self._increase()
            self._next_increase += p.increase_timer_s

    def next_event(self) -> float:
        return min(self._next_alpha, self._next_increase)

    def _increase(self) -> None:
        p = self.params
        if min(self._timer_stage, self._byte_stage) > p.fast_recovery_steps:
            self.target_bps = min(p.line_bps, self.target_bps + p.hai_bps)
        elif max(self._timer_stage, self._byte_stage) >= p.fast_recovery_steps:
            self.target_bps = min(p.line_bps, self.target_bps + p.ai_bps)
        self.rate_bps = (self.rate_bps + self.target_bps) / 2


@dataclass
class NotificationPoint:
    """One QP's receiving side: a CNP for a marked packet, at most one per interval."""
    interval_s: float
    last: float = float("-inf")
    sent: int = 0
    marked: int = 0

    def on_marked(self, now: float) -> bool:
        """A CE-marked packet arrived: True if a CNP is to be sent now."""
        self.marked += 1
        if now - self.last < self.interval_s:
            return False
        self.last = now
        self.sent += 1
        return True


@dataclass
class Pacer:
    """A token bucket at a QP's current rate: how much it may send now, and when it may next."""
    burst: int  # bytes: one batch the NIC hands the socket at once
    tokens: float = 0.0
    at: float = 0.0

    def allowed(self, rate_bps: float, now: float) -> float:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * rate_bps / 8)
        self.at = now
        return self.tokens

    def spend(self, size: int) -> None:
        self.tokens -= size

    def ready_at(self, rate_bps: float, size: int) -> float:
        """When `size` bytes will be allowed at this rate."""
        return self.at + max(0.0, size - self.tokens) * 8 / rate_bps
