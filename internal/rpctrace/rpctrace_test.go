package rpctrace

import "testing"

// Off by default: a ferry without FERRY_TRACE_RPC dials with no
// interceptor at all, so tracing costs nothing unless asked for.
func TestOffByDefault(t *testing.T) {
	if on {
		t.Skip("FERRY_TRACE_RPC is set in this test's environment")
	}
	if got := Options("gw"); len(got) != 0 {
		t.Fatalf("Options with tracing off = %d options, want none", len(got))
	}
	on = true
	t.Cleanup(func() { on = false })
	if got := Options("gw"); len(got) != 2 {
		t.Fatalf("Options with tracing on = %d options, want 2 (unary and stream)", len(got))
	}
}
