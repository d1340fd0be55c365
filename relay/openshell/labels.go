package openshell

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// maxLabelValue is the longest label value a gateway takes (Kubernetes'
// limit, which upstream's validation copies).
const maxLabelValue = 63

// LabelValue is v as a label value a gateway takes: v itself when it is
// one (at most 63 characters of [A-Za-z0-9-_.], alphanumeric at both
// ends, or empty); else v with every other character made "_", cut to 54
// characters and trimmed to alphanumeric ends, then "-" and the first 8
// hex digits of v's SHA-256. "rtzll/rascal" becomes
// "rtzll_rascal-<8 hex>": readable, the same in every process, and two
// values that differ give different labels but by a hash collision. A
// selector for v is LabelValue(v).
func LabelValue(v string) string {
	if ValidLabelValue(v) {
		return v
	}
	b := []byte(v)
	for i, c := range b {
		if !labelChar(c) {
			b[i] = '_'
		}
	}
	s := string(b)
	if len(s) > maxLabelValue-9 {
		s = s[:maxLabelValue-9]
	}
	s = strings.TrimFunc(s, func(r rune) bool { return !alnum(byte(r)) })
	sum := sha256.Sum256([]byte(v))
	h := hex.EncodeToString(sum[:4])
	if s == "" {
		return h
	}
	return s + "-" + h
}

// ValidLabelValue reports whether v is a label value as is.
func ValidLabelValue(v string) bool {
	if v == "" {
		return true
	}
	if len(v) > maxLabelValue || !alnum(v[0]) || !alnum(v[len(v)-1]) {
		return false
	}
	for i := 0; i < len(v); i++ {
		if !labelChar(v[i]) {
			return false
		}
	}
	return true
}

// CheckLabelKey refuses a label key a gateway refuses: an optional DNS
// subdomain prefix and "/", then a name of at most 63 characters of
// [A-Za-z0-9-_.], alphanumeric at both ends.
func CheckLabelKey(k string) error {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name = k
	}
	if name == "" || !ValidLabelValue(name) {
		return fmt.Errorf("label key %q: want [prefix/]name, name 1 to 63 characters of [A-Za-z0-9-_.] with alphanumeric ends", k)
	}
	if hasPrefix {
		ok := prefix != "" && len(prefix) <= 253 && !strings.Contains(prefix, "..") &&
			alnum(prefix[0]) && alnum(prefix[len(prefix)-1]) &&
			!strings.ContainsFunc(prefix, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.') })
		if !ok {
			return fmt.Errorf("label key %q: its prefix is not a DNS subdomain", k)
		}
	}
	return nil
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func labelChar(c byte) bool { return alnum(c) || c == '-' || c == '_' || c == '.' }
