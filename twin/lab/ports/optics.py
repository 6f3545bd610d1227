"""What every port's optic reports (digital optical monitoring, as a switch's `show interfaces
transceiver` or `ethtool -m` print it): transmit power, receive power, temperature, and whether
the receive power is below its low-warning threshold.

The twin has no lasers, so the readings are modelled: each port's optic has steady values drawn
from the lab's name and the port (every port of a healthy lab a little different, as real optics
are), a port receives what the far optic sends less the cable's loss, and a port whose physical
layer carries an attenuation (lab/ports/phy.py: a dying optic or a dirty connector that drops or
damages frames, faults/silent_drop.py and faults/bitflip.py) receives that much less. Nothing
else moves them. Thresholds are a 100G short-reach optic's (SR4-like): receive power low warning
at -8 dBm, sensitivity about -10 dBm, where errors begin.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass

from twin.lab.handle import Lab
from twin.lab.ports import phy
from twin.model.fabric import Fabric
from twin.model.ports import Port, peer, ports

RX_LOW_WARNING_DBM = -8.0
TX_DBM = (-1.0, 1.0)  # a healthy optic's launch power
CABLE_LOSS_DB = (0.5, 1.5)  # fibre and two connectors
TEMPERATURE_C = (33.0, 45.0)
# The attenuation that puts a receiver where it loses `share_pct` of its frames: past the warning
# threshold already at 0.01 %, a little deeper as the loss grows (bit errors rise steeply as the
# power falls below sensitivity).
FAILING_DB = 9.0


def attenuation_db(share_pct: float) -> float:
    """The optic's extra loss when its port drops or damages `share_pct` of the frames."""
    return round(FAILING_DB + 2.0 * math.log10(1.0 + share_pct), 2)


def centi_db(share_pct: float) -> int:
    """attenuation_db as the physical layer stores it (0.01 dB)."""
    return round(attenuation_db(share_pct) * 100)


@dataclass(frozen=True)
class Reading:
    node: str
    ifname: str
    tx_dbm: float
    rx_dbm: float
    temperature_c: float

    @property
    def rx_low(self) -> bool:
        return self.rx_dbm < RX_LOW_WARNING_DBM

    def as_dict(self) -> dict:
        return asdict(self) | {"rx_low": self.rx_low}


def _draw(fabric: Fabric, port: Port, what: str, span: tuple[float, float]) -> float:
    digest = hashlib.blake2b(f"{fabric.name}/{port.node}/{port.ifname}/{what}".encode(), digest_size=8).digest()
    low, high = span
    return low + (high - low) * int.from_bytes(digest, "little") / 2**64


def healthy(fabric: Fabric) -> dict[Port, Reading]:
    """Every port's readings with nothing wrong."""
    found = {}
    for port in ports(fabric):
        far = peer(fabric, port)
        rx = _draw(fabric, far, "tx", TX_DBM) - _draw(fabric, port, "cable", CABLE_LOSS_DB)
        found[port] = Reading(port.node, port.ifname, round(_draw(fabric, port, "tx", TX_DBM), 2), round(rx, 2),
                              round(_draw(fabric, port, "temperature", TEMPERATURE_C), 1))
    return found


def readings(lab: Lab) -> dict[Port, Reading]:
    """Every port's readings now: the healthy ones, less what the physical layer attenuates."""
    found = healthy(lab.fabric)
    for port, fault in phy.faults(lab).items():
        if fault["attenuation"] and port in found:
            was = found[port]
            found[port] = Reading(was.node, was.ifname, was.tx_dbm, round(was.rx_dbm - fault["attenuation"] / 100, 2),
                                  was.temperature_c)
    return found
