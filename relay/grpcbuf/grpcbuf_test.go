package grpcbuf

import "testing"

func TestGetPut(t *testing.T) {
	p := &Pool{}
	for _, n := range []int{0, 1, 255, 256, 257, 4096, 1<<18 - 1, 1 << 18, 1<<18 + 1, 1 << 22, 1<<22 + 1} {
		b := p.Get(n)
		if len(*b) != n {
			t.Fatalf("Get(%d) gave len %d", n, len(*b))
		}
		if n <= 1<<maxShift && cap(*b) < n {
			t.Fatalf("Get(%d) gave cap %d", n, cap(*b))
		}
		p.Put(b)
		b2 := p.Get(n)
		if len(*b2) != n {
			t.Fatalf("second Get(%d) gave len %d", n, len(*b2))
		}
	}
}
