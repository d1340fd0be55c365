package server

import (
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
)

// reportStale returns the OnStale of the extraction a Put or Restore
// runs: it logs what was removed, and what could not be, and puts the
// count in the call's trailer.
func (s *server) reportStale(stream grpc.ServerStream, op, dest string) func(int, error) {
	return func(n int, err error) {
		if n > 0 {
			s.log.Warn("removed stale staging directories", "op", op, "dest", dest, "count", n)
			stream.SetTrailer(metadata.Pairs(wire.StaleKey, strconv.Itoa(n)))
		}
		if err != nil {
			s.log.Warn("cannot remove a stale staging directory", "op", op, "dest", dest, "err", err)
		}
	}
}
