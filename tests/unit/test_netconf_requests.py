"""Interface requests encoded once (netconf.py, through nlbatch): each port's copy decodes, with
pyroute2's own parser, to that port's address, prefix length and MTU."""

from ipaddress import IPv4Interface

from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

from twin.lab.kernel import netconf


def _decode(kind, data: bytes):
    message = kind(data)
    message.decode()
    return message


def test_an_address_request_carries_the_port_address_and_prefix():
    for text in ("10.0.3.17/31", "10.9.0.1/24", "172.16.255.254/32"):
        [data] = netconf.address_request(IPv4Interface(text))
        message = _decode(ifaddrmsg, data)
        assert message["prefixlen"] == IPv4Interface(text).network.prefixlen
        assert message.get_attr("IFA_LOCAL") == message.get_attr("IFA_ADDRESS") == text.split("/")[0]


def test_a_link_request_sets_up_and_mtu():
    [data] = netconf._link_up(9000)
    message = _decode(ifinfmsg, data)
    assert message["flags"] & 1 and message["change"] & 1  # IFF_UP
    assert message.get_attr("IFLA_MTU") == 9000
    [plain] = netconf._link_up(None)
    assert _decode(ifinfmsg, plain).get_attr("IFLA_MTU") is None


def test_a_cpu_mask_is_the_kernels_text():
    assert netconf.cpu_mask({0, 1}) == "00000003"
    assert netconf.cpu_mask({0, 33}) == "00000002,00000001"
    assert netconf.cpu_mask({31}) == "80000000"
