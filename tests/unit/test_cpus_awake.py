"""The lab's CPU latency request (procs.cpus_awake, lab/awake.py): held while its process lives,
gone with it; the process goes with the lab's state."""

import os
import struct
import subprocess
import sys
import time

import pytest

from twin.lab.awake import STATE_CHECK_S
from twin.procs import CPU_LATENCY_QOS

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists(CPU_LATENCY_QOS),
                                reason="the CPU latency request needs root and PM QoS")


def _target_us() -> int:
    """What the kernel's CPU latency target is now: the smallest request held (a large default
    when none is)."""
    with open(CPU_LATENCY_QOS, "rb") as handle:
        return struct.unpack("i", handle.read(4))[0]


@pytest.mark.quiet  # another lab's controller holds one too: run where no lab is up
def test_the_request_holds_the_cpus_awake_until_its_process_exits():
    before = _target_us()
    assert before > 0, "a request was held before the test: is a lab up?"
    holder = subprocess.Popen([sys.executable, "-c", "from twin.procs import cpus_awake; import sys, time; "
                               "assert cpus_awake() is None; print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert _target_us() == 0
    finally:
        holder.kill()  # as a crash would end it: the request goes with the descriptor
        holder.wait()
    assert _target_us() == before


def test_the_labs_holder_ends_itself_when_the_labs_state_is_gone(tmp_path):
    """`twin cleanup` of a lab whose state was lost finds its nodes, not its processes: the holder
    must not keep the machine's CPUs polling for good."""
    state = tmp_path / "state.json"
    state.write_text("{}")
    holder = subprocess.Popen([sys.executable, "-m", "twin.lab.awake", str(state)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        time.sleep(2 * STATE_CHECK_S)
        assert holder.poll() is None, "the holder ended while its lab's state was there"
        state.unlink()
        assert holder.wait(timeout=10 * STATE_CHECK_S) == 0
    finally:
        holder.kill()
        holder.wait()
