# ferry: the two commands that matter are `make demo` and `make test`.
# Both install what they need on a fresh Debian machine when run as root.

SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
FERRY := $(BIN)/ferry
# Packages the tests drive as real peers: sshd, protoc for the staleness
# check, busybox and GNU tar as sandbox tools, rsync as a benchmark peer,
# tmux as the terminal of `ferry exec -t`'s test.
APT_PKGS := openssh-server openssh-client protobuf-compiler libprotobuf-dev busybox tar rsync time bc zstd tmux
TEST_TIMEOUT ?= 30m
GOTESTSUM_VERSION := v1.13.0
# make test lists the tests that took longer than this.
SLOW_TEST ?= 10s
# make test PKGS=./session/... runs a part.
PKGS ?= ./...

# The agent ferry installs in sandboxes: static, one build per
# architecture, zstd-compressed and embedded in ferry (transfer/agent/bundle).
AGENT_ARCHS := amd64 arm64
AGENT_BLOBS := transfer/agent/bundle/blobs
AGENT_MAX := 4194304
# grpcnotrace leaves out gRPC's x/net/trace, and with it html/template and
# text/template: a quarter of the agent's size (6 MB of ferry's).
GO_TAGS := grpcnotrace
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)

.PHONY: all build agent deps test vet demo bench proto clean

all: build

build: agent
	@mkdir -p $(BIN)
	$(GO) build -tags $(GO_TAGS) -o $(FERRY) ./cmd/ferry

# agent rebuilds each architecture's agent (quick when nothing changed: Go's
# build cache) and recompresses it only when its digest changed. zstd -19
# keeps it under the 4 MiB wire budget, which is checked.
agent: deps
	@mkdir -p build $(AGENT_BLOBS)
	@set -e; for a in $(AGENT_ARCHS); do \
		out=build/ferry-agent-linux-$$a; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$a $(GO) build -trimpath -tags $(GO_TAGS) -ldflags='-s -w -buildid= -X main.version=$(VERSION)' -o $$out ./cmd/ferry-agent; \
		sum=$$(sha256sum < $$out | cut -d' ' -f1); \
		if [ "$$(cat $(AGENT_BLOBS)/ferry-agent-linux-$$a.sha256 2>/dev/null)" != "$$sum" ] || [ ! -f $(AGENT_BLOBS)/ferry-agent-linux-$$a.zst ]; then \
			zstd -19 -q -f $$out -o $(AGENT_BLOBS)/ferry-agent-linux-$$a.zst; \
			echo $$sum > $(AGENT_BLOBS)/ferry-agent-linux-$$a.sha256; \
		fi; \
		size=$$(stat -c %s $(AGENT_BLOBS)/ferry-agent-linux-$$a.zst); \
		echo "agent linux/$$a: $$(stat -c %s $$out) bytes, $$size zstd"; \
		if [ $$size -gt $(AGENT_MAX) ]; then echo "agent linux/$$a: $$size bytes compressed, over the 4 MiB budget" >&2; exit 1; fi; \
	done

# deps installs the packages above when one is missing, and versitygw (the
# S3-compatible server the session store's S3 tests start) with go install.
# apt-get needs root; elsewhere it says what to install and goes on (tests
# that need a missing peer skip outside CI and fail inside it).
deps:
	@missing=""; \
	command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || missing="$$missing openssh-server"; \
	command -v ssh >/dev/null 2>&1 || missing="$$missing openssh-client"; \
	command -v protoc >/dev/null 2>&1 || missing="$$missing protobuf-compiler"; \
	[ -f /usr/include/google/protobuf/struct.proto ] || missing="$$missing libprotobuf-dev"; \
	command -v busybox >/dev/null 2>&1 || missing="$$missing busybox"; \
	command -v rsync >/dev/null 2>&1 || missing="$$missing rsync"; \
	[ -x /usr/bin/time ] || missing="$$missing time"; \
	command -v zstd >/dev/null 2>&1 || missing="$$missing zstd"; \
	command -v bc >/dev/null 2>&1 || missing="$$missing bc"; \
	command -v tmux >/dev/null 2>&1 || missing="$$missing tmux"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "installing:$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
		else \
			echo "missing:$$missing (run as root, or: sudo apt-get install -y$$missing)"; \
		fi; \
	fi
	@gobin=$$($(GO) env GOBIN); [ -n "$$gobin" ] || gobin=$$($(GO) env GOPATH | cut -d: -f1)/bin; \
	command -v versitygw >/dev/null 2>&1 || [ -x "$$gobin/versitygw" ] || { \
		echo "installing: versitygw v1.8.0 (the S3 server of the session store tests)"; \
		$(GO) install github.com/versity/versitygw/cmd/versitygw@v1.8.0; \
	}
	@gobin=$$($(GO) env GOBIN); [ -n "$$gobin" ] || gobin=$$($(GO) env GOPATH | cut -d: -f1)/bin; \
	[ -x "$$gobin/gotestsum" ] && "$$gobin/gotestsum" --version 2>/dev/null | grep -q ' $(GOTESTSUM_VERSION)$$' || { \
		echo "installing: gotestsum $(GOTESTSUM_VERSION) (make test's runner, for its list of slow tests)"; \
		$(GO) install gotest.tools/gotestsum@$(GOTESTSUM_VERSION); \
	}

vet:
	$(GO) vet ./...

# The agent builds first: the benchmarks' path tests run ferry's own
# binary, which carries them, as make build's does.
# gotestsum runs go test, printing a line a package and the whole output
# of a failed test (its --- FAIL lines included), keeps the events in
# build/test.json and, passed or failed, lists the slowest tests after the
# run: where a slow machine's minutes went. GORACE spares each -race test
# binary the second it would sleep before exiting 0 (atexit_sleep_ms);
# a GORACE of the caller's comes after, and wins.
test: deps agent vet
	@mkdir -p build
	@gobin=$$($(GO) env GOBIN); [ -n "$$gobin" ] || gobin=$$($(GO) env GOPATH | cut -d: -f1)/bin; \
	GORACE="atexit_sleep_ms=0 $$GORACE" "$$gobin/gotestsum" --format pkgname-and-test-fails --format-icons text --hide-summary skipped --jsonfile build/test.json -- -race -timeout $(TEST_TIMEOUT) $(PKGS); rc=$$?; \
	echo "tests over $(SLOW_TEST):"; "$$gobin/gotestsum" tool slowest --jsonfile build/test.json --threshold $(SLOW_TEST) | head -25; \
	exit $$rc

demo: deps build
	@FERRY=$(FERRY) bash cmd/ferry/demo.sh

# LINK=lan|region|far (or a comma list) runs only BenchmarkLink over those
# emulated links; without it every benchmark runs, the link ones over all
# three profiles. bench.json and the plots land in build/bench.
# SESSION_FILES sizes the many-files session save (300000 for the
# issue's full size; the default keeps a whole make bench near 20 minutes
# on 2 cores, and the per-100,000-files trend it prints is the same).
LINK ?=
SESSION_FILES ?= 100000
bench: deps build
	FERRY=$(FERRY) FERRY_BENCH=1 FERRY_BENCH_LINK=$(LINK) FERRY_BENCH_OUT=$(CURDIR)/build/bench \
		FERRY_BENCH_SESSION_FILES=$${FERRY_BENCH_SESSION_FILES:-$(SESSION_FILES)} \
		$(GO) test -run '^$$' -bench '$(if $(LINK),^BenchmarkLink$$,.)' -benchtime 1x -timeout 60m ./cmd/ferry/

proto: deps
	bash proto/gen.sh

clean:
	rm -rf $(BIN) build $(AGENT_BLOBS)/ferry-agent-*
