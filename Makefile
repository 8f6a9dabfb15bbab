# The two entry points for a fresh machine (see README.md).
#   make run   set up, build, and list this machine's tasks through the best backend
#   make test  set up, build, and run every test
CARGO ?= cargo

.PHONY: setup build run test bench clean

setup:
	@scripts/setup

build: setup
	$(CARGO) build --release --workspace

run: build
	./target/release/taskdiag dump --groups base,cred --summary

test: setup
	$(CARGO) test --workspace --release

clean:
	$(CARGO) clean
