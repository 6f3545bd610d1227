"""FRR's ppoll fix (twin/lab/native/frr_ppoll.c), on loops that do what FRR 8.4's does: wait for a
timer with its timeout truncated to whole milliseconds, then poll with a zero timeout until due; and
poll with a zero timeout when tasks are ready, which must return at once."""

from frr_preloads import needs, run

# argv: libfrr's path. FRR's thread_call reads the thread's clocks (thread_getrusage) around each
# task; `task()` does the same.
LOOP = r"""
import ctypes, json, sys, time
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
scope = ctypes.CDLL(None)
class timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]
usage = ctypes.create_string_buffer(256)
def task():
    scope.thread_getrusage(usage)
def poll(ms):
    return scope.ppoll(None, 0, ctypes.byref(timespec(0, ms * 1_000_000)), None)
def wait_for(due):  # FRR's loop until a timer is due; returns its zero-timeout polls
    spins = 0
    while (left := due - time.monotonic_ns()) > 0:
        ms = left // 1_000_000  # FRR's truncation (lib/thread.c, fd_poll)
        poll(ms)
        spins += ms == 0
    return spins
out = {"after_timeout": 0, "after_task": 0}
for _ in range(20):
    task()
    out["after_timeout"] += wait_for(time.monotonic_ns() + 5_700_000)  # a timer 5.7 ms away
    task()
    out["after_task"] += wait_for(time.monotonic_ns() + 700_000)  # a task left a timer 0.7 ms away
start = time.monotonic()
for _ in range(1000):  # a task ran, and another is ready: FRR polls for I/O, then runs it
    poll(0)
    task()
out["ready_s"] = time.monotonic() - start
print(json.dumps(out))
"""


def _loop(preload: bool) -> dict:
    return run(LOOP, "ppoll", preload)


pytestmark = needs("ppoll")


def test_the_fix_ends_the_spin_before_each_timer():
    shipped, fixed = _loop(False), _loop(True)
    for case in ("after_timeout", "after_task"):
        assert shipped[case] >= 100, f"the loop should spin without the fix: {shipped}"
        assert fixed[case] <= 2 * 20, f"{fixed[case]} zero-timeout polls over 20 timers with the fix ({case})"


def test_polls_for_ready_tasks_return_at_once():
    # waiting 1 ms each, as for a timer, would take 1 s
    assert _loop(True)["ready_s"] < 0.5, "a zero-timeout poll after a task waited"
