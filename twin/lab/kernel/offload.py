"""Checksum offload of a node's interfaces (pyroute2's ethtool, used inside the namespace)."""

from __future__ import annotations

from pyroute2.ethtool import Ethtool

from twin.lab.kernel.nsutil import in_netns

CHECKSUM_FEATURES = ("tx-checksum-ip-generic", "rx-checksum")


def get_checksum_offload(netns_path: str, ifnames: list[str]) -> dict[str, dict[str, bool]]:
    with in_netns(netns_path):
        ethtool = Ethtool()
    try:
        result = {}
        for ifname in ifnames:
            features = ethtool.get_features(ifname).features
            result[ifname] = {name: bool(features[name].enable) for name in CHECKSUM_FEATURES if name in features}
        return result
    finally:
        ethtool.close()


def set_checksum_offload(netns_path: str, settings: dict[str, dict[str, bool]]) -> None:
    with in_netns(netns_path):
        ethtool = Ethtool()
    try:
        for ifname, wanted in settings.items():
            features = ethtool.get_features(ifname)
            for name, enable in wanted.items():
                features.features[name].enable = enable
            ethtool.set_features(ifname, features)
    finally:
        ethtool.close()


def snmp(netns_path: str, table: str = "snmp") -> dict[str, int]:
    """/proc/net/snmp of the namespace as {'Udp.InCsumErrors': n, ...}; table "netstat": the
    TcpExt counters ({'TcpExt.TCPDeliveredCE': n, ...})."""
    with in_netns(netns_path):
        with open(f"/proc/thread-self/net/{table}") as handle:
            lines = handle.read().splitlines()
    counters = {}
    for header, values in zip(lines[::2], lines[1::2]):
        proto, names = header.split(":", 1)
        for name, value in zip(names.split(), values.split(":", 1)[1].split()):
            counters[f"{proto}.{name}"] = int(value)
    return counters


# Segmentation offloads of host NICs. A veth passes a TCP or UDP GSO super-packet (up to 64 KB)
# through the fabric as one packet, so a 1 % drop would take out forty frames at once and a
# queue would count one packet where a switch sees forty. With these off, hosts segment in
# software after their own queue (GSO stays on) and every packet in the fabric is a frame of
# the lab's MTU, as on real links.
SEGMENTATION_FEATURES = ("tx-tcp-segmentation", "tx-tcp-ecn-segmentation", "tx-tcp-mangleid-segmentation",
                         "tx-tcp6-segmentation", "tx-tcp-accecn-segmentation", "tx-udp-segmentation")


def segment_in_software(netns_path: str, ifnames: list[str]) -> None:
    with in_netns(netns_path):
        ethtool = Ethtool()
    try:
        for ifname in ifnames:
            features = ethtool.get_features(ifname)
            for name in SEGMENTATION_FEATURES:
                if name in features.features:
                    features.features[name].enable = False
            ethtool.set_features(ifname, features)
    finally:
        ethtool.close()
