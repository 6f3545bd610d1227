"""Just enough eBPF to count a queue in the kernel: an instruction encoder, the bpf() system
call (maps, program load), and a ring buffer reader.

No clang, libbpf or bcc: the programs the twin needs are a few dozen instructions, written in
`pfc/programs.py` with the encoder here, verified by the kernel when loaded. pyroute2 attaches
them (cls_bpf on a clsact qdisc, by file descriptor).
"""
