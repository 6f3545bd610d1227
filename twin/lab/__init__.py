"""A running lab. Its rooms, lowest first; a module imports only from its own room and the ones
before it (tests/unit/test_layers.py, LAB_ROOMS):

- `state`: the lab's record on disk: what it owns, its faults, merged between processes;
  `publisher`: a real-time loop's published file, stored from a thread so the loop never waits
  for the disk.
- `kernel/`: plumbing inside one network namespace, given its path: netlink (`nsutil`, batches in
  `nlbatch`), links, addresses, sysctls and host routing (`netconf`), a port's queue tree
  (`shaping`), offloads, the FIB's ECMP widths (`fib`), a split lab's VXLAN tunnels to the other
  machines (`vxlan`). Knows no lab.
- `runtime/`: what a node runs in (netns, docker) and how a command runs there.
- the handle: `Lab` (`handle`: the model, the state, the runtime, owned processes), lab files by
  name (`files`), nftables in a node (`nft`), who a rank runs as (`identity`), real packets
  between host NICs (`reach`: ICMP all pairs, `traffic`: UDP flows).
- `ebpf/`: the C programs and their loader (libbpf); `pfc/`: the PFC and ECN controller; `bfd/`:
  the BFD data plane, one process sending and timing every switch's BFD packets for its bfdd
  (their steady state in the kernel: `fastpath`); `awake`: the process that keeps the CPUs out of
  deep idle states while the lab is up (the ports' timers).
- `ports/`: what every port is and counts: its physical layer (`phy`: hidden faults, black holes,
  swapped cables), its optics' readings (`optics`), interface and queue counters (`counters`).
- `routing/`: the nodes' daemons: FRR (`frr`: start, ask; `frr_answers`: judge what it answers,
  unit tested on captured answers; `vty`: its sockets), LLDP (`lldp`), convergence (`converge`),
  checks before a bring-up (`preflight`).
- the lab's life: bring-up and teardown (`deploy`), `twin lab status` (`status`), whether this
  machine runs a lab (`capacity`, `idle`), the machine-wide ARP table book (`neigh`), the
  snapshot that proves a fault's clear restores everything (`kernel_state`).
(The containerlab export is the model's: model/export.py.)
"""
