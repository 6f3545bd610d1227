"""The flows workload's side of hash dodging (workloads/flows.py `_dodge`): which flows it asks the
dodger to move or to sweep, against a dodger that only records what it is asked."""

import queue
from types import SimpleNamespace

from twin.mitigate.dodge import Move
from twin.workloads.flows import Flows, _DodgeState


class RecordingDodger:
    def __init__(self):
        self.moves, self.named = queue.Queue(), 0
        self.swept: list[list[int]] = []
        self.requested: list[int] = []

    def sweep(self, reqs):
        self.swept.append(sorted(req.flow for req in reqs))

    def request(self, req):
        self.requested.append(req.flow)


class Sock:
    def setblocking(self, _flag):
        pass

    def close(self):
        pass


def workload(flows: int) -> Flows:
    nic = SimpleNamespace(label="host-g1-h1:nic1")
    work = Flows.__new__(Flows)  # only what `_dodge` reads: no lab
    work.dodger, work.pairs = RecordingDodger(), [(nic, nic)] * flows
    work.params = SimpleNamespace(flows_per_pair=1)
    return work


def test_a_flow_being_moved_when_a_link_is_named_is_swept_once_its_move_lands():
    """Flow 1 lost packets and is being moved (its move planned on what was named before) when a
    detector names a link: the sweep takes the idle flows 0 and 2; flow 1 is swept as soon as its
    move lands, since its new path may cross the link just named. A flow whose move lands with
    nothing new named is not swept again."""
    work = workload(3)
    state = _DodgeState(3, 0)
    senders = [Sock() for _ in range(3)]
    state.pending.add(1)
    work.dodger.named = 1  # a verdict came
    work._dodge(state, 0.0, 0.25, senders, {}, {})
    assert work.dodger.swept == [[0, 2]]
    work.dodger.moves.put(Move(1, Sock()))  # flow 1's move lands
    work._dodge(state, 0.0, 0.25, senders, {}, {})
    assert work.dodger.swept == [[0, 2], [1]]
    for flow in (0, 1, 2):  # the sweeps' answers: nothing crosses the named link
        work.dodger.moves.put(Move(flow, None, settled=False))
    state.pending.add(0)
    work._dodge(state, 0.0, 0.25, senders, {}, {})
    work.dodger.moves.put(Move(0, Sock()))
    work._dodge(state, 0.0, 0.25, senders, {}, {})
    assert work.dodger.swept == [[0, 2], [1]] and not state.pending
