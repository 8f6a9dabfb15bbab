# The two entry points for a fresh machine (see README.md).
#   make run   set up, build, and list this machine's tasks through the best backend
#   make test  set up, build, and run every test
CARGO ?= cargo

.PHONY: setup build python python-install run test deb test-deb procps-suite test-kernels test-kernels-ci bench fuzz clean

setup:
	@scripts/setup

build: setup
	$(CARGO) build --release --workspace

# The Python package (crates/python): its wheel, installed into target/python
# (scripts/python; `make python-install` installs it into the python3 on PATH).
python: setup
	scripts/python build

python-install: setup
	scripts/python install

run: build python
	./target/release/taskdiag dump --groups base,cred --summary

# The task_diag article's table on this machine (root; ~7 min, ~4 GiB): docs/BENCHMARKS.md.
# The harness is its own binary (crates/bench), not part of what taskdiag ships.
bench: build
	./target/release/taskdiag-bench --tasks 50000 --runs 5

# The build first: tests use what cargo test does not build (the Python module, lib_taskdiag.so).
test:
	@scripts/setup --test
	$(CARGO) build --release --workspace
	$(CARGO) test --workspace --release --no-fail-fast
	scripts/python test
	./target/release/taskdiag-bench --quick
	scripts/procps-suite

# The Debian packages of this machine's release (scripts/deb): target/debian/taskdiag_*.deb
# (taskdiag, taskdiagd, the exporter, the tools' links, units, man pages, completions, docs)
# and python3-taskdiag_*.deb. cargo-deb is installed on first use (`cargo install --locked`).
deb: setup
	scripts/deb

# The packages installed into a clean, minimal Debian root and checked there (root; ~1 min once
# the root is cached in /var/cache/taskdiag): every command runs, the man pages render, the units
# pass systemd-analyze verify and work when the root boots (systemd-nspawn), the completions
# load, purging removes all the packages installed.
test-deb: deb
	scripts/test-deb

# procps's own DejaGnu suite, once with procps's binaries and once with taskdiag as ps, pgrep,
# pkill and pidwait; fails if taskdiag loses a case procps passes (root on Debian: fetches and
# builds Debian's procps source once, in /var/tmp). TOOLS= narrows it (comma list).
procps-suite: build
	scripts/procps-suite $(if $(TOOLS),--tools $(TOOLS))

# The kernel matrix (root): the tests inside Debian's 5.10, 6.1 and 6.12 kernels under qemu,
# one table kernel x suite (docs/KERNELS.md). KERNELS= and SUITES= narrow it (comma lists).
test-kernels: setup
	scripts/kernel-matrix $(if $(KERNELS),--kernels $(KERNELS)) $(if $(SUITES),--suites $(SUITES))

# CI's part of the matrix (.ci/run; ~20 min under TCG, the three guests side by side): the
# differential, bpf and maps suites on every kernel, pidns on 5.10 and 6.1 (6.12 runs the same
# program flavour and link parameters as 6.1), the profiler's on 6.1 (Debian 12's kernel: no
# PROCMAP_QUERY, the maps read whole), and the kernel-dependent parts of the daemon's suite on
# 5.10 (no map walk, Debian's bpf sysctl, groups the bounded flavour leaves to /proc) and of the
# tools' on 6.12 (Debian 13's kernel, the newest RSS accounting). The whole suites run in `make
# test-kernels`. docs/KERNELS.md, "What runs where".
KERNELS_CI = 5.10:differential,bpf,maps,pidns,daemon-kernel 6.1:differential,bpf,maps,pidns,profile \
	6.12:differential,bpf,maps,tools-kernel
test-kernels-ci: setup
	scripts/kernel-matrix --jobs 3 --plan '$(KERNELS_CI)'

# Coverage-guided fuzzing of the decoder, the request parser and taskdiagd's request framing (stable Rust; cargo-fuzz is
# installed on first use). FUZZ_SECONDS per target.
FUZZ_SECONDS ?= 60
fuzz:
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	cd fuzz && $(CARGO) fuzz run -s none decode_stream -- -max_total_time=$(FUZZ_SECONDS) -max_len=4096
	cd fuzz && $(CARGO) fuzz run -s none parse_request -- -max_total_time=$(FUZZ_SECONDS)
	cd fuzz && $(CARGO) fuzz run -s none daemon_request -- -max_total_time=$(FUZZ_SECONDS) -max_len=8192

clean:
	$(CARGO) clean
	rm -rf packaging/debian/generated
