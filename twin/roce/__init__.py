"""RoCE's transport, emulated in user space over UDP through the real fabric (this kernel has no
RDMA): reliable-connection queue pairs with packet sequence numbers, go-back-N recovery and
NCCL's timers (qp.py), a NIC thread per rank that moves MTU-sized packets with UDP GSO/GRO
(nic.py), and a torch.distributed backend, `roce`, whose collectives run over them with torch
doing the reductions (backend.py). gloo over TCP stays the real library to compare with.
"""
