"""The FRR daemons, described once (model/daemons.py): start order, readiness, the vty shortcut, and
the same daemons in a lab's argv and in the containerlab export."""

from pathlib import Path

from twin.lab.bfd.paths import DPLANE_SOCKET
from twin.lab.routing.frr import daemon_argv
from twin.model.daemons import DAEMONS, answering, start_groups
from twin.model.export import _daemon


def test_zebra_starts_alone_before_the_daemons_that_connect_to_it():
    groups = start_groups()
    assert [d.name for d in groups[0]] == ["zebra"]
    assert sorted(d.name for group in groups[1:] for d in group) == ["bfdd", "bgpd"]


def test_show_commands_go_to_the_daemon_that_answers_them():
    assert answering("show bgp summary json").name == "bgpd"
    assert answering("show ip bgp neighbors json").name == "bgpd"
    assert answering("show bfd peers json").name == "bfdd"
    assert answering("show ip route json").name == "zebra"
    assert answering("show interface json") is None  # vtysh's to route


def test_only_bfdd_gets_a_control_socket_in_the_lab_and_in_the_export():
    for daemon in DAEMONS:
        argv, exported = daemon_argv(daemon, Path("/run/x")), _daemon(daemon)
        assert argv[0].endswith(f"/{daemon.name}") and f"/run/x/{daemon.name}.conf" in argv
        assert ("--bfdctl" in argv) == ("--bfdctl" in exported) == (daemon.name == "bfdd")


def test_an_offloaded_bfdd_listens_for_the_data_plane_in_its_node_directory_and_the_export_does_not():
    """A netns lab's bfdd hands its sessions to the lab's BFD data plane (lab/bfd/), listening where
    the data plane connects; bgpd and zebra are unchanged, and a containerlab node's bfdd sends its own."""
    for daemon in DAEMONS:
        argv = daemon_argv(daemon, Path("/run/x"), bfd_offload=True)
        offloaded = "--dplaneaddr" in argv
        assert offloaded == (daemon.name == "bfdd")
        if offloaded:
            assert argv[argv.index("--dplaneaddr") + 1] == f"unix:/run/x/{DPLANE_SOCKET}"
        assert "--dplaneaddr" not in daemon_argv(daemon, Path("/run/x")) and "--dplaneaddr" not in _daemon(daemon)
