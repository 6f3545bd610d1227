"""Real torch.distributed collectives over gloo, one rank per host NIC.

`groups` picks the ranks and their ring order, `metrics` holds the nccl-tests
conventions, `worker` is the rank process, `launcher` starts ranks in the host
namespaces as processes owned by the lab and collects what they measured.
"""
