"""What a lab at rest is charged for: a recorded process with its children (lldpd's monitor leaves
the work to a child), and LLDP's interval, chosen from the lab's ports."""

import os
import signal
import subprocess
import sys
import time

from twin.lab import idle
from twin.lab.files import open_lab
from twin.lab.routing import lldp

# A parent that sleeps while its one child spins: as lldpd's monitor and its unprivileged child.
FAMILY = ("import os, time\n"
          "child = os.fork()\n"
          "if child == 0:\n"
          "    end = time.monotonic() + 10\n"
          "    while time.monotonic() < end: pass\n"
          "    os._exit(0)\n"
          "print(child, flush=True)\n"
          "os.waitpid(child, 0)\n")


def ticks(pid: int) -> int:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def test_a_process_is_charged_for_the_child_that_does_its_work():
    parent = subprocess.Popen([sys.executable, "-c", FAMILY], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    try:
        while ticks(child) < 5:  # it has spun 50 ms at least
            time.sleep(0.05)
        os.kill(child, signal.SIGSTOP)  # both still now: the parent waits for it
        time.sleep(0.05)
        family = idle.family_ticks([parent.pid])
        assert family == {parent.pid: ticks(parent.pid) + ticks(child)}
        assert idle.family_ticks([]) == {}
        assert idle.family_ticks([2 ** 22 + 1]) == {2 ** 22 + 1: None}  # no such process
    finally:
        os.kill(child, signal.SIGKILL)
        parent.wait()


def test_lldp_announces_every_second_until_its_frames_would_cost_a_tenth_of_a_core():
    fabrics = {name: open_lab(name)[1] for name in ("mini", "rail8", "pod128", "aipod")}
    intervals = {name: lldp.tx_interval_s(fabric) for name, fabric in fabrics.items()}
    assert intervals == {"mini": 1, "rail8": 1, "pod128": 4, "aipod": 17}
    for name, fabric in fabrics.items():
        ports = 2 * len(fabric.links)  # every link's two ends
        assert ports * lldp.CPU_S_PER_PORT_FRAME / intervals[name] <= lldp.LLDP_CORES
