# fabric-twin. On a fresh Debian machine, as root, every target installs what it needs.
SHELL := /bin/bash
VENV ?= .venv
PYTHON ?= python3
TWIN := $(VENV)/bin/twin
PYTEST := $(VENV)/bin/pytest
LAB ?= rail4
VERSION = $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' twin/__init__.py)
# Debian packages the twin runs on (FRR for routing, lldpd for who is cabled to whom in each node,
# iproute2/nftables/ethtool for the data plane and faults, iperf3 for rate checks, util-linux for unshare, python3-venv for the venv,
# gcc to build the fixes preloaded into FRR).
SYSTEM_PACKAGES := frr lldpd nftables iproute2 ethtool iperf3 iputils-ping procps util-linux python3-venv gcc libc6-dev \
	clang libbpf-dev libbpf1 bpftool
# Preloaded into FRR's daemons: its event loop spins before every timer, bgpd wipes idle ring
# buffers into memory (see each source).
FRR_PRELOADS := $(patsubst %.c,%.so,$(wildcard twin/lab/native/frr_*.c))
# The data-plane programs (clang -target bpf, CO-RE against the kernel's own BTF, dumped into
# vmlinux.h by bpftool; loaded with libbpf, twin/lab/ebpf/libbpf.py).
BPF_OBJECTS := $(patsubst %.c,%.o,$(wildcard twin/lab/ebpf/*.bpf.c))
BPF_CFLAGS := -O2 -g -Wall -Werror -target bpf -mcpu=v3
# The dashboard's test drives a real headless browser.
TEST_PACKAGES := chromium chromium-driver

.PHONY: help deps test-deps packages venv lab down status lint test unit integration e2e e2e-generated images bench golden architecture clean

help:
	@echo "make lab SCENARIO=silent-drop   run a fault drill (see scenarios/), results in results/"
	@echo "make lab LAB=rail4        bring a lab up and leave it running (see labs/)"
	@echo "  ... RUNTIME=docker      on containers instead of namespaces (needs make images)"
	@echo "make down LAB=rail4       remove it, and everything it owns"
	@echo "make lint                 the house rules (ruff: pyproject.toml [tool.ruff])"
	@echo "make test                 unit + integration tests (integration needs root)"
	@echo "make e2e [QUICK=1]        every shipped scenario, graded; fails if an expectation fails"
	@echo "make e2e-generated [GENERATED=9] [SEED=1] [QUICK=1]  random labs and fault drills, graded per fault kind"
	@echo "make images               the switch and host container images (debootstrap + docker import)"
	@echo "make bench                lab, fault and workload benchmarks -> docs/benchmarks.md"
	@echo "make golden               rewrite golden files after an intended model change"
	@echo "make architecture         redraw docs/architecture.png from the imports (docs/architecture.md)"

deps:
	@$(MAKE) -s packages PACKAGES="$(SYSTEM_PACKAGES)"
	@$(MAKE) -s $(FRR_PRELOADS) $(BPF_OBJECTS)

twin/lab/ebpf/vmlinux.h:
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > $@.tmp && mv $@.tmp $@

twin/lab/ebpf/%.bpf.o: twin/lab/ebpf/%.bpf.c twin/lab/ebpf/queues.h twin/lab/ebpf/balance.h twin/lab/ebpf/wire.h twin/lab/ebpf/phy.h twin/lab/ebpf/bfd.h twin/lab/ebpf/vmlinux.h
	clang $(BPF_CFLAGS) -c $< -o $@

twin/lab/native/frr_%.so: twin/lab/native/frr_%.c
	cc -shared -fPIC -O2 -Wall -Werror -o $@ $< -ldl

test-deps:
	@$(MAKE) -s packages PACKAGES="$(TEST_PACKAGES)"

packages:
	@missing=$$(for p in $(PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:" $$missing; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  if echo "$$missing" | grep -qx lldpd; then \
	    echo "lldpd: the machine-wide service the package starts is stopped (labs run their own per node)"; \
	    { systemctl disable --now lldpd || service lldpd stop; } >/dev/null 2>&1 || true; \
	  fi; \
	fi

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

venv: $(VENV)/.installed

lab: deps venv
ifdef SCENARIO
	$(TWIN) run scenarios/$(SCENARIO).yaml $(if $(RUNTIME),--runtime $(RUNTIME))
else
	$(TWIN) lab up $(LAB) $(if $(RUNTIME),--runtime $(RUNTIME))
endif

down: venv
	$(TWIN) lab down $(LAB)

status: venv
	$(TWIN) lab status $(LAB)

# Two pytest-xdist workers: the tests on the shipped labs (netns) in one, the docker tier (its
# labs renamed d-*) in the other, tests with labs of their own in either (tests/conftest.py
# groups them). Tests that act on every lab of the machine (`twin cleanup`), and those that hold
# the emulated RoCE transport to a hardware NIC's standard or measure its throughput (marker quiet:
# under the docker tier's load the emulation can resend a packet of a lossless incast,
# tests/integration/test_congestion.py, and its shapers lose line time, tests/integration/test_roce.py;
# so does a TCP flow's, tests/integration/test_rail4.py),
# run alone afterwards. The slowest are listed.
PARALLEL := -n 2 --dist loadgroup --durations=12

unit: venv
	$(PYTEST) -q -m "not integration" tests

integration: deps test-deps venv
	$(PYTEST) -q $(PARALLEL) -m "integration and not (machine_wide or quiet)" tests
	$(PYTEST) -q -m "integration and (machine_wide or quiet)" tests

# The house rules (pyproject.toml [tool.ruff]: pyflakes, pycodestyle at 120 columns, import
# order, bugbear, pyupgrade); .ci/run runs it before the tests.
lint: venv
	$(VENV)/bin/ruff check .

test: deps test-deps venv
	$(PYTEST) -q $(PARALLEL) -m "not (machine_wide or quiet)" tests
	$(PYTEST) -q -m "machine_wide or quiet" tests

# The fault drill: every scenario in scenarios/, graded. QUICK=1: shortened timelines (CI);
# E2E_LABS=rail4: only the scenarios on those labs.
e2e: deps venv
	$(TWIN) e2e $(if $(QUICK),--quick) $(if $(RUNTIME),--runtime $(RUNTIME)) $(foreach l,$(E2E_LABS),--lab $(l)) --results results/e2e

# Drills on labs nobody tuned detection on: GENERATED=N random labs and faults (SEED=1).
GENERATED ?= 9
SEED ?= 1
e2e-generated: deps venv
	$(TWIN) e2e --generated $(GENERATED) --seed $(SEED) $(if $(QUICK),--quick) --results results/e2e

# Container images, tagged with the project version: a debootstrapped Debian base (no registry
# here), then the switch and host images from it. Docker's cache rebuilds only what changed.
images: deps venv
	@command -v docker >/dev/null && command -v debootstrap >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap >/dev/null; }
	@docker info >/dev/null 2>&1 || { echo "no Docker daemon: start it (systemctl start docker, or dockerd &)"; exit 1; }
	@# (pip's and the legacy builder's notices filtered out)
	set -o pipefail; bash images/build.sh $(VERSION) $(VENV)/bin/python 2>&1 | \
	  { grep -v '^WARNING: Location\|DEPRECATED\|buildx\|^ *https://\|^$$' || true; }

golden: venv
	UPDATE_GOLDEN=1 $(PYTEST) -q tests/unit/test_golden.py

architecture: venv
	$(VENV)/bin/python tools/architecture.py --out docs/architecture.png

bench: deps venv
	$(VENV)/bin/python bench/lab_lifecycle.py --labs mini rail4 rail8 pod64 pod128 --runs 1 --out docs/benchmarks.md
	$(VENV)/bin/python bench/big_drill.py --out docs/benchmarks.md
	$(VENV)/bin/python bench/fault_convergence.py --runs 3 --out docs/benchmarks.md
	$(VENV)/bin/python bench/workloads.py --labs rail4 rail8 --out docs/benchmarks.md
	$(VENV)/bin/python bench/drills.py --out docs/benchmarks.md
	$(VENV)/bin/python bench/lossless.py --labs rail4 rail8:100mbit --out docs/benchmarks.md
	$(VENV)/bin/python bench/congestion.py --lab rail8:100mbit --seconds 60 --incast-s 20 --out docs/benchmarks.md
	$(VENV)/bin/python bench/stress.py --incasts 10 --out docs/benchmarks.md
	$(VENV)/bin/python bench/marking_cost.py --out docs/benchmarks.md
	$(VENV)/bin/python bench/phy_cost.py --out docs/benchmarks.md
	$(VENV)/bin/python bench/split.py --labs rail8 pod64 --machines 2 4 --out docs/benchmarks.md
	$(VENV)/bin/python bench/dual_port.py --rate 25mbit --runs 2 --out docs/benchmarks.md
	$(VENV)/bin/python bench/transport.py --lab rail4 --out docs/benchmarks.md
	$(VENV)/bin/python bench/multipath.py --labs rail4 rail8 --runs 5 --faults --out docs/benchmarks.md
	$(VENV)/bin/python bench/uplink_downlink.py --runs 3 --out docs/benchmarks.md
	$(VENV)/bin/python bench/roce_dodge.py --runs 3 --out docs/benchmarks.md
	$(VENV)/bin/python bench/steer_cost.py --lab rail4 --runs 3 --out docs/benchmarks.md
	$(VENV)/bin/python bench/transport_state.py --lab mini --runs 2 --out docs/benchmarks.md
	$(VENV)/bin/python bench/transport_state.py --lab rail4 --runs 1 --out docs/benchmarks.md
	$(VENV)/bin/python bench/transport_state.py --lab mini --runs 2 --transport tcp --out docs/benchmarks.md
	$(VENV)/bin/python bench/transport_state.py --lab rail4 --runs 1 --transport tcp --out docs/benchmarks.md
	$(VENV)/bin/python bench/oneway.py --lab rail4 --runs 2 --out docs/benchmarks.md
	$(VENV)/bin/python bench/detect_tail.py --trials 600 --out docs/benchmarks.md
	$(VENV)/bin/python bench/config_audit.py --labs mini rail4 rail8 --sweeps 20 --out docs/benchmarks.md
	$(VENV)/bin/python bench/gnmi.py --lab rail8 --seconds 60 --out docs/benchmarks.md
	$(VENV)/bin/python bench/probe_cover.py --run mini rail4 rail8 --plan-only gen:3,4,8,2,2,4 gen:3,8,8,2,4,8 gen:3,16,8,2,8,16 --out docs/benchmarks.md
	$(VENV)/bin/python bench/generated_drills.py --count 63 --seed 1 --out docs/benchmarks.md
	$(VENV)/bin/python bench/generated_drills.py --count 18 --seed 33 --shapes hard --results results/bench-generated-hard --out docs/benchmarks.md
	$(VENV)/bin/python bench/calibration.py results/bench-generated results/bench-generated-hard --out docs/benchmarks.md
	$(VENV)/bin/python bench/adversarial.py --fuzz 150 --out docs/benchmarks.md
	@if docker info >/dev/null 2>&1; then $(VENV)/bin/python bench/runtimes.py --lab rail4 --runs 3 --out docs/benchmarks.md; \
	else echo "no Docker daemon: skipped bench/runtimes.py (docker against netns)"; fi

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache build $(FRR_PRELOADS) $(BPF_OBJECTS) twin/lab/ebpf/vmlinux.h
