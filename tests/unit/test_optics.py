"""The optics' readings (lab/ports/optics.py): steady per port, healthy above the warning, and a port whose
physical layer attenuates reads low by exactly that much."""

from test_model import fabric_of as load_fabric

from twin.lab.ports import optics
from twin.model.ports import peer


def test_a_healthy_lab_reads_the_same_twice_and_every_port_is_above_its_warning():
    fabric = load_fabric("rail4")
    first, again = optics.healthy(fabric), optics.healthy(fabric)
    assert first == again and len(first) == 2 * len(fabric.links)
    assert all(not reading.rx_low for reading in first.values())
    assert len({reading.rx_dbm for reading in first.values()}) > len(first) // 2  # optics differ a little


def test_a_port_receives_what_the_far_optic_sends_less_the_cable():
    fabric = load_fabric("mini")
    readings = optics.healthy(fabric)
    for port, reading in readings.items():
        loss = readings[peer(fabric, port)].tx_dbm - reading.rx_dbm
        assert optics.CABLE_LOSS_DB[0] - 0.01 <= loss <= optics.CABLE_LOSS_DB[1] + 0.01


def test_the_smallest_drop_a_fault_can_state_already_reads_below_the_warning():
    worst_healthy = optics.TX_DBM[1] - optics.CABLE_LOSS_DB[0]
    assert worst_healthy - optics.attenuation_db(0.01) < optics.RX_LOW_WARNING_DBM
    assert optics.attenuation_db(20) > optics.attenuation_db(5) > optics.attenuation_db(0.01)
    assert optics.centi_db(5) == round(optics.attenuation_db(5) * 100)
