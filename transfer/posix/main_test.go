package posix_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/ferry-dev/ferry/relay/grpcbuf"
)

func TestMain(m *testing.M) {
	// As the ferry binary does, so tests run its data path.
	grpcbuf.Install()
	goleak.VerifyTestMain(m)
}
