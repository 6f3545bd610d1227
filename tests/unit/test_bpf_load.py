"""Loading BPF programs (ebpf/syscall.py): a good program loads without the verifier's log; a bad
one is refused with the verifier's reason, read on a second load with the log."""

import os

import pytest

from twin.lab.ebpf import asm
from twin.lab.ebpf import syscall as bpf

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="loading BPF programs needs root")


def test_a_valid_program_loads():
    fd = bpf.load_program(bpf.PROG_SCHED_CLS, asm.assemble([asm.mov(0, imm=0), asm.exit_()]), "ftw_test_ok")
    assert fd > 0
    os.close(fd)


def test_a_refused_program_names_the_verifiers_reason():
    # r0 is never written before exit: the verifier says so
    with pytest.raises(bpf.BpfError) as caught:
        bpf.load_program(bpf.PROG_SCHED_CLS, asm.assemble([asm.exit_()]), "ftw_test_bad")
    assert "ftw_test_bad" in caught.value.message
    assert "R0" in (caught.value.hint or ""), caught.value.hint
