#!/usr/bin/env bash
# Regenerates the Go code for every .proto file under proto/.
#
# Usage: proto/gen.sh [OUTDIR]
#
# OUTDIR stands for the repository root (default: this repository), so the
# code for proto/openshell/v1/openshell.proto lands in
# OUTDIR/proto/openshell/v1/. The staleness test passes a temporary
# directory and compares the result with the committed files.
#
# The plugins are built from the versions pinned by the `tool` lines in
# go.mod, so every machine produces the same bytes. protoc itself is not a Go
# module and cannot be pinned that way; 3.21.12 is the version the committed
# files were made with (Debian's protobuf-compiler).
set -euo pipefail

want_protoc="3.21.12"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
out="${1:-$repo}"

if ! command -v protoc >/dev/null 2>&1; then
	echo "gen.sh: protoc not found on PATH; install protoc $want_protoc (Debian: apt-get install protobuf-compiler libprotobuf-dev)" >&2
	exit 1
fi
have_protoc="$(protoc --version | awk '{print $2}')"
if [[ "$have_protoc" != "$want_protoc" ]]; then
	# Only the version comment in the output depends on it in practice, so a
	# different protoc is worth a warning, not a stop.
	echo "gen.sh: warning: protoc $have_protoc found, committed code was made with $want_protoc" >&2
fi

bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT

# Built from inside the module so go.mod decides the plugin versions.
(
	cd "$repo"
	go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
	go build -o "$bin/protoc-gen-go-grpc" google.golang.org/grpc/cmd/protoc-gen-go-grpc
)

mkdir -p "$out/proto"
out="$(cd "$out/proto" && pwd)"

# Paths relative to proto/ become the registered file names and the import
# paths between our files, so they must not depend on where the repo lives.
mapfile -t files < <(cd "$here" && find . -name '*.proto' -not -path './testdata/*' | sed 's|^\./||' | LC_ALL=C sort)
if [[ ${#files[@]} -eq 0 ]]; then
	echo "gen.sh: no .proto files under $here" >&2
	exit 1
fi

cd "$here"
protoc \
	--plugin=protoc-gen-go="$bin/protoc-gen-go" \
	--plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
	-I . \
	--go_out="$out" --go_opt=paths=source_relative \
	--go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
	"${files[@]}"
