import pytest

from twin.inet import checksum as _checksum
from twin.lab.reach import _echo
from twin.units import format_rate, parse_rate_bps, parse_size_bytes, parse_time_s, period_within


@pytest.mark.parametrize("text, bps", [("200mbit", 200_000_000), ("1gbit", 10**9), ("1.5Mbit", 1_500_000),
                                       ("500kbit", 500_000)])
def test_rate(text, bps):
    assert parse_rate_bps(text) == bps


@pytest.mark.parametrize("text", ["200", "200mbps", "fast", "-1mbit"])
def test_rate_rejects(text):
    with pytest.raises(ValueError, match="kbit, mbit or gbit"):
        parse_rate_bps(text)


def test_size_and_time():
    assert parse_size_bytes("8MiB") == 8 * 1024 * 1024
    assert parse_time_s("20us") == pytest.approx(2e-5)
    assert format_rate(200e6) == "200 Mbit/s"


def test_icmp_echo_checksum_verifies():
    packet = _echo(0x1234, 7)
    assert _checksum(packet) == 0  # a valid ICMP checksum sums to zero


def test_period_within_is_the_shortest_whole_step_whose_cost_fits():
    # 0.3 CPU s a period within 0.1 of a core: every 3 s (0.3 / 0.1 is 2.9999999999999996 in floats)
    assert period_within(0.3, 0.1) == 3
    assert period_within(0.31, 0.1) == 4
    assert period_within(0.01, 0.1) == 1  # a cost within one step takes that step
    # in ms, by hundreds: 250 ms of CPU a period within half a core takes 500 ms; 260 ms, 600 ms
    assert period_within(250, 0.5, step=100) == 500
    assert period_within(260, 0.5, step=100) == 600
