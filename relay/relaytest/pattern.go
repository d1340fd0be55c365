package relaytest

// Pattern is an endless, cheap, deterministic byte stream that is not
// trivially compressible and uses every byte value: a xorshift generator.
type Pattern struct{ s uint64 }

// NewPattern returns a Pattern seeded with seed.
func NewPattern(seed uint64) *Pattern { return &Pattern{s: seed*0x9E3779B97F4A7C15 | 1} }

func (p *Pattern) Read(b []byte) (int, error) {
	s := p.s
	i := 0
	for ; i+8 <= len(b); i += 8 {
		s ^= s << 13
		s ^= s >> 7
		s ^= s << 17
		b[i], b[i+1], b[i+2], b[i+3] = byte(s), byte(s>>8), byte(s>>16), byte(s>>24)
		b[i+4], b[i+5], b[i+6], b[i+7] = byte(s>>32), byte(s>>40), byte(s>>48), byte(s>>56)
	}
	for ; i < len(b); i++ {
		s ^= s << 13
		s ^= s >> 7
		s ^= s << 17
		b[i] = byte(s)
	}
	p.s = s
	return len(b), nil
}
