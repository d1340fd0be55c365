package agent

import (
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// staleKey is the trailer metadata in which Put and Restore tell the host
// how many stale staging directories (archive.RemoveStaleStaging) the
// agent removed before it staged: the host logs it, as the agent's own
// log reaches nobody on success. A key in the trailer, not a field of the
// response, so that a failed call carries it too and the protocol's
// messages stay as they are.
const staleKey = "ferry-stale-staging"

// maxStale bounds the count the host takes from an agent.
const maxStale = 1 << 20

// reportStale returns the OnStale of the extraction a Put or Restore
// runs: it logs what was removed, and what could not be, and puts the
// count in the call's trailer.
func (s *server) reportStale(stream grpc.ServerStream, op, dest string) func(int, error) {
	return func(n int, err error) {
		if n > 0 {
			s.log.Warn("removed stale staging directories", "op", op, "dest", dest, "count", n)
			stream.SetTrailer(metadata.Pairs(staleKey, strconv.Itoa(n)))
		}
		if err != nil {
			s.log.Warn("cannot remove a stale staging directory", "op", op, "dest", dest, "err", err)
		}
	}
}

// staleCount is the count an agent's trailer reports; anything but a
// small non-negative number is none.
func staleCount(md metadata.MD) int {
	v := md.Get(staleKey)
	if len(v) != 1 {
		return 0
	}
	n, err := strconv.Atoi(v[0])
	if err != nil || n < 0 || n > maxStale {
		return 0
	}
	return n
}
