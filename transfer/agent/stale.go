package agent

import (
	"strconv"

	"google.golang.org/grpc/metadata"

	"github.com/ferry-dev/ferry/transfer/agent/internal/wire"
)

// maxStale bounds the count the host takes from an agent.
const maxStale = 1 << 20

// staleCount is the count an agent's trailer reports; anything but a
// small non-negative number is none.
func staleCount(md metadata.MD) int {
	v := md.Get(wire.StaleKey)
	if len(v) != 1 {
		return 0
	}
	n, err := strconv.Atoi(v[0])
	if err != nil || n < 0 || n > maxStale {
		return 0
	}
	return n
}
