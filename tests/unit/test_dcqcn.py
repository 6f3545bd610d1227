"""DCQCN's arithmetic (twin/roce/dcqcn.py) against the paper's equations."""

from __future__ import annotations

import pytest

from twin.roce.dcqcn import DcqcnParams, NotificationPoint, Pacer, ReactionPoint

LINE = 200e6
P = DcqcnParams().for_line_rate(LINE)


def test_parameters_stretch_with_the_line_rate():
    assert P.alpha_period_s == pytest.approx(55e-6 * 200)  # 40 Gbit/s over 200 Mbit/s
    assert P.cnp_interval_s == pytest.approx(0.01)
    assert P.byte_counter == 10 * 1024 * 1024  # bytes stay bytes
    assert P.ai_bps == pytest.approx(LINE * 40e6 / 40e9)


def test_a_cnp_cuts_by_half_alpha_and_raises_alpha():
    rp = ReactionPoint(P, now=0.0)
    rp.alpha = 0.5
    rp.on_cnp(0.0)
    assert rp.target_bps == LINE
    assert rp.rate_bps == pytest.approx(LINE * (1 - 0.5 / 2))
    assert rp.alpha == pytest.approx((1 - P.g) * 0.5 + P.g)
    rp.alpha = 1.0
    rp.on_cnp(0.0)  # alpha 1: the cut is half, never more
    assert rp.rate_bps == pytest.approx(LINE * 0.75 * 0.5)
    assert rp.target_bps == LINE  # no increase since the last cut: the target stays (NICs' clamp rule)


def test_the_target_follows_the_rate_down_only_after_an_increase():
    rp = ReactionPoint(P, now=0.0)
    rp.on_cnp(0.0)
    rp.advance(P.increase_timer_s + 1e-9)  # one increase
    rising = rp.rate_bps
    rp.on_cnp(P.increase_timer_s + 2e-9)
    assert rp.target_bps == pytest.approx(rising)


def test_alpha_decays_in_periods_without_a_cnp():
    rp = ReactionPoint(P, now=0.0)
    rp.on_cnp(0.0)
    after_cnp = rp.alpha
    rp.advance(P.alpha_period_s * 1.01)  # the period with the CNP: no decay
    assert rp.alpha == pytest.approx(after_cnp)
    rp.advance(P.alpha_period_s * 3.01)  # two more without one
    assert rp.alpha == pytest.approx(after_cnp * (1 - P.g) ** 2)


def test_fast_recovery_then_additive_then_hyper_increase():
    rp = ReactionPoint(P, now=0.0)
    rp.on_cnp(0.0)
    rp.advance(P.increase_timer_s + 1e-9)
    rp.on_cnp(P.increase_timer_s + 1e-9)  # a cut after an increase: the target is below line rate
    start = P.increase_timer_s + 1e-9
    rate, target = rp.rate_bps, rp.target_bps
    assert target < LINE
    for step in range(1, P.fast_recovery_steps):  # timer stages 1..F-1: fast recovery, target kept
        rp.advance(start + step * P.increase_timer_s + 1e-9)
        rate = (rate + target) / 2
        assert rp.target_bps == target and rp.rate_bps == pytest.approx(rate)
    rp.advance(start + P.fast_recovery_steps * P.increase_timer_s + 1e-9)  # timer stage F: additive
    target += P.ai_bps
    rate = (rate + target) / 2
    assert rp.target_bps == pytest.approx(target) and rp.rate_bps == pytest.approx(rate)
    now = start + P.fast_recovery_steps * P.increase_timer_s + 2e-9
    for _ in range(P.fast_recovery_steps + 1):  # byte stages 1..F+1: additive (the timer's is F)
        rp.on_sent(P.byte_counter, now)
        target += P.ai_bps
        rate = (rate + target) / 2
    assert rp.target_bps == pytest.approx(target) and rp.rate_bps == pytest.approx(rate)
    rp.advance(start + (P.fast_recovery_steps + 1) * P.increase_timer_s + 1e-9)  # both stages past F: hyper
    target += P.hai_bps
    rate = (rate + target) / 2
    assert rp.target_bps == pytest.approx(target) and rp.rate_bps == pytest.approx(rate)


def test_the_rate_never_passes_line_rate_nor_falls_below_the_minimum():
    rp = ReactionPoint(P, now=0.0)
    for _ in range(200):
        rp.on_cnp(0.0)
    assert rp.rate_bps == pytest.approx(P.min_bps)
    rp.advance(1000.0)
    assert P.min_bps < rp.rate_bps <= LINE and rp.target_bps <= LINE


def test_a_qp_spraying_over_two_ports_recovers_to_both_ports_line():
    """A multipath QP of a dual-port NIC: cut, it climbs back to the two ports' rate, not one's."""
    both = P.spanning(2)
    assert (both.line_bps, both.ai_bps, both.cnp_interval_s) == (2 * LINE, 2 * P.ai_bps, P.cnp_interval_s)
    rp = ReactionPoint(both, now=0.0)
    rp.on_cnp(0.0)
    assert rp.rate_bps < LINE * 1.5
    rp.advance(1000.0)
    assert rp.rate_bps > 1.9 * LINE


def test_the_notification_point_sends_one_cnp_per_interval():
    np_ = NotificationPoint(interval_s=0.01)
    sent = [np_.on_marked(t / 1000) for t in range(0, 30)]  # a marked packet every ms
    assert sum(sent) == 3 and sent[0] and sent[10] and sent[20]
    assert np_.marked == 30 and np_.sent == 3


def test_the_pacer_holds_a_qp_to_its_rate():
    pacer = Pacer(burst=9000)
    assert pacer.allowed(8e6, 0.0) == 0  # starts empty: 1 MB/s
    assert pacer.allowed(8e6, 0.004) == pytest.approx(4000)
    pacer.spend(9000)
    assert pacer.ready_at(8e6, 9000) == pytest.approx(0.004 + 14000 / 1e6)
    assert pacer.allowed(8e6, 10.0) == 9000  # never more than one burst saved up
