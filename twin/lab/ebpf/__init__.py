"""The lab's data-plane programs: C (`*.bpf.c`, one shared layout in `queues.h`), compiled by clang
at `make deps` and loaded with libbpf (`libbpf.py`, ctypes over Debian's libbpf1).

    queues.bpf.c  every switch queue counted per packet (PFC's XOFF/XON events on a ring buffer)
                  and ECN-marked (RED-like, kmin..kmax); attached by pfc/queues.py
    layout.py     the same structures as Python reads them from the maps (checked against the
                  object's BTF by tests/unit/test_bpf_layout.py)
    ringbuf.py    a reader of the ring buffer map
"""
