package wire

import (
	"strconv"
	"time"

	"google.golang.org/grpc/metadata"
)

// RTTKey is the header metadata in which the agent tells the host, at the
// start of a Put, the connection's round trip as it measured it (its
// hello's, in microseconds): the host's Auto compression goes by it
// (frame.WriterOptions.RTT) and has no round trip of its own to time
// before the Put's data fills the link. A header, sent before the Put's
// first message is read, so that it arrives a round trip after the Put
// starts.
const RTTKey = "ferry-rtt-us"

// RTTHeader is the header that carries rtt.
func RTTHeader(rtt time.Duration) metadata.MD {
	return metadata.Pairs(RTTKey, strconv.FormatInt(rtt.Microseconds(), 10))
}

// maxRTT bounds the round trip the host takes from an agent: it is only a
// hint for compression, but a number past a minute is no round trip.
const maxRTT = time.Minute

// RTTOf is the round trip an agent's header reports; anything but a
// positive number under maxRTT is none (0).
func RTTOf(md metadata.MD) time.Duration {
	v := md.Get(RTTKey)
	if len(v) != 1 {
		return 0
	}
	us, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil || us <= 0 || us > maxRTT.Microseconds() {
		return 0
	}
	return time.Duration(us) * time.Microsecond
}
