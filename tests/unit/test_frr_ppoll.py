"""FRR's ppoll fix (twin/lab/native/frr_ppoll.c), on a loop that does what FRR 8.4's does: wait for a
timer with its timeout truncated to whole milliseconds, then poll with a zero timeout until due."""

import subprocess
import sys

import pytest

from twin.lab.frr import PPOLL_FIX

LOOP = r"""
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
class timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]
spins = 0
for _ in range(20):
    due = time.monotonic_ns() + 5_700_000  # a timer 5.7 ms away
    while (left := due - time.monotonic_ns()) > 0:
        ms = left // 1_000_000  # FRR's truncation (lib/thread.c, fd_poll)
        libc.ppoll(None, 0, ctypes.byref(timespec(0, ms * 1_000_000)), None)
        spins += ms == 0
print(spins)
"""


def _spins(preload: bool) -> int:
    env = {"LD_PRELOAD": str(PPOLL_FIX)} if preload else {}
    return int(subprocess.run([sys.executable, "-c", LOOP], env=env, capture_output=True, text=True,
                              check=True).stdout)


@pytest.mark.skipif(not PPOLL_FIX.is_file(), reason="frr_ppoll.so is not built (make deps builds it)")
def test_the_fix_ends_the_spin_before_each_timer():
    without, with_fix = _spins(False), _spins(True)
    assert without >= 200, f"the loop should spin without the fix ({without} zero-timeout polls)"
    assert with_fix <= 2 * 20, f"{with_fix} zero-timeout polls over 20 timers with the fix"
