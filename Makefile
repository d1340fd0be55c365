# ferry: the two commands that matter are `make demo` and `make test`.
# Both install what they need on a fresh Debian machine when run as root.

SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
FERRY := $(BIN)/ferry
# Packages the tests drive as real peers: sshd, protoc for the staleness
# check, busybox and GNU tar as sandbox tools, rsync as a benchmark peer.
APT_PKGS := openssh-server openssh-client protobuf-compiler libprotobuf-dev busybox tar rsync time bc
TEST_TIMEOUT ?= 30m

.PHONY: all build deps test vet demo bench proto clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(FERRY) ./cmd/ferry

# deps installs the packages above when one is missing. apt-get needs root;
# elsewhere it says what to install and goes on (tests that need a missing
# peer skip outside CI and fail inside it).
deps:
	@missing=""; \
	command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || missing="$$missing openssh-server"; \
	command -v ssh >/dev/null 2>&1 || missing="$$missing openssh-client"; \
	command -v protoc >/dev/null 2>&1 || missing="$$missing protobuf-compiler"; \
	[ -f /usr/include/google/protobuf/struct.proto ] || missing="$$missing libprotobuf-dev"; \
	command -v busybox >/dev/null 2>&1 || missing="$$missing busybox"; \
	command -v rsync >/dev/null 2>&1 || missing="$$missing rsync"; \
	[ -x /usr/bin/time ] || missing="$$missing time"; \
	command -v bc >/dev/null 2>&1 || missing="$$missing bc"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "installing:$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
		else \
			echo "missing:$$missing (run as root, or: sudo apt-get install -y$$missing)"; \
		fi; \
	fi

vet:
	$(GO) vet ./...

test: deps vet
	$(GO) test -race -timeout $(TEST_TIMEOUT) ./...

demo: deps build
	@FERRY=$(FERRY) bash cmd/ferry/demo.sh

bench: deps build
	FERRY_BENCH=1 $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./cmd/ferry/

proto: deps
	bash proto/gen.sh

clean:
	rm -rf $(BIN)
