package archive

import (
	"errors"
	"testing"
)

func TestCleanName(t *testing.T) {
	for _, tc := range []struct {
		raw, want string
		err       error
	}{
		{"a", "a", nil},
		{"a/b/", "a/b", nil},
		{"./a//b/./c", "a/b/c", nil},
		{"./", ".", nil},
		{".", ".", nil},
		{"a b/ü 名", "a b/ü 名", nil},
		{`back\slash`, `back\slash`, nil},
		{"..a/b..", "..a/b..", nil},
		{"", "", ErrUnsafePath},
		{"/a", "", ErrUnsafePath},
		{"//a", "", ErrUnsafePath},
		{"..", "", ErrUnsafePath},
		{"../a", "", ErrUnsafePath},
		{"a/..", "", ErrUnsafePath},
		{"a/../b", "", ErrUnsafePath},
		{"a/\x00", "", ErrUnsafePath},
		{string(make([]byte, 11)), "", ErrLimit},
	} {
		got, err := cleanName(tc.raw, 10)
		if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("cleanName(%q) = %q, %v; want %q, %v", tc.raw, got, err, tc.want, tc.err)
		}
	}
}

func TestCheckLinkTarget(t *testing.T) {
	for _, tc := range []struct {
		name, target string
		err          error
	}{
		{"l", "x", nil},
		{"l", ".", nil},
		{"l", "a/../b", nil},
		{"d/l", "..", nil},
		{"d/e/l", "../../x", nil},
		{"d/l", "../d/../x", nil},
		{"l", "..", ErrLinkEscape},
		{"l", "../x", ErrLinkEscape},
		{"l", "a/../../x", ErrLinkEscape},
		{"d/l", "../..", ErrLinkEscape},
		{"d/l", "/etc", ErrLinkEscape},
		{"l", "", ErrLinkEscape},
		{"l", "a\x00b", ErrLinkEscape},
		{"l", "0123456789a", ErrLimit},
	} {
		err := checkLinkTarget(tc.name, tc.target, 10)
		if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("checkLinkTarget(%q, %q) = %v, want %v", tc.name, tc.target, err, tc.err)
		}
		if tc.err == ErrLinkEscape && !errors.Is(err, ErrUnsafePath) {
			t.Errorf("checkLinkTarget(%q, %q) = %v, not also ErrUnsafePath", tc.name, tc.target, err)
		}
	}
}

func TestGuessName(t *testing.T) {
	block := func(name string, typ byte, data string) []byte {
		b := make([]byte, 512)
		copy(b, name)
		b[156] = typ
		copy(b[257:], "ustar\x0000")
		return append(b, data...)
	}
	for _, tc := range []struct {
		raw  []byte
		want string
	}{
		{nil, ""},
		{block("plain", '0', ""), "plain"},
		{block("x/PaxHeaders.0/f", 'x', "12 path=a/b\n"), "a/b"},
		{block("x/PaxHeaders.0/f", 'x', "30 mtime=1.5\n"), "x/f"},
		{block("./PaxHeaders/f", 'x', ""), "./f"},
		{block("././@LongLink", 'L', "long/name\x00"), "long/name"},
		{block("cut", '0', "")[:300], "cut"},
	} {
		if got := guessName(tc.raw); got != tc.want {
			t.Errorf("guessName(%.40q) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}
