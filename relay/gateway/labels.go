package gateway

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Label and selector rules are upstream's (openshell-server
// grpc/validation.rs, persistence parse_label_selector at v0.0.111): the
// Kubernetes label shape, checked on CreateSandbox and on every pair of a
// ListSandboxes selector. The messages are upstream's too, since callers
// match on them.

// maxLabelSelectorPairs is upstream's MAX_LABEL_SELECTOR_PAIRS.
const maxLabelSelectorPairs = 64

// isAlnum is Rust's char::is_alphanumeric, which upstream uses: Unicode
// Alphabetic or Numeric, not only ASCII.
func isAlnum(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Other_Alphabetic, r)
}

// labelChars reports whether s holds only alphanumerics, '-', '_' and '.'.
func labelChars(s string) bool {
	for _, r := range s {
		if !isAlnum(r) && r != '-' && r != '_' && r != '.' {
			return false
		}
	}
	return true
}

func alnumEnds(s string) (first, last bool) {
	f, _ := utf8.DecodeRuneInString(s)
	l, _ := utf8.DecodeLastRuneInString(s)
	return isAlnum(f), isAlnum(l)
}

// validLabelKey checks an optional DNS-subdomain prefix and a required name
// of at most 63 bytes, at most 253 bytes in all.
func validLabelKey(key string) error {
	if key == "" {
		return fmt.Errorf("label key cannot be empty")
	}
	if len(key) > 253 {
		return fmt.Errorf("label key exceeds 253 characters: '%s'", key)
	}
	prefix, name, hasPrefix := strings.Cut(key, "/")
	if !hasPrefix {
		name = key
	}
	switch {
	case name == "":
		return fmt.Errorf("label key name segment cannot be empty: '%s'", key)
	case len(name) > 63:
		return fmt.Errorf("label key name segment exceeds 63 characters: '%s'", key)
	case !labelChars(name):
		return fmt.Errorf("label key name segment contains invalid characters (must be alphanumeric, '-', '_', or '.'): '%s'", key)
	}
	if first, last := alnumEnds(name); !first {
		return fmt.Errorf("label key name segment must start with alphanumeric character: '%s'", key)
	} else if !last {
		return fmt.Errorf("label key name segment must end with alphanumeric character: '%s'", key)
	}
	if !hasPrefix {
		return nil
	}
	switch {
	case prefix == "":
		return fmt.Errorf("label key prefix cannot be empty when '/' is present: '%s'", key)
	case len(prefix) > 253:
		return fmt.Errorf("label key prefix exceeds 253 characters: '%s'", key)
	case strings.ContainsFunc(prefix, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.')
	}):
		return fmt.Errorf("label key prefix must be a DNS subdomain (lowercase alphanumeric, '-', '.'): '%s'", key)
	case strings.HasPrefix(prefix, "-") || strings.HasPrefix(prefix, ".") ||
		strings.HasSuffix(prefix, "-") || strings.HasSuffix(prefix, "."):
		return fmt.Errorf("label key prefix cannot start or end with '-' or '.': '%s'", key)
	case strings.Contains(prefix, ".."):
		return fmt.Errorf("label key prefix cannot contain consecutive dots: '%s'", key)
	}
	return nil
}

// validLabelValue allows the empty value, as Kubernetes does.
func validLabelValue(value string) error {
	switch {
	case value == "":
		return nil
	case len(value) > 63:
		return fmt.Errorf("label value exceeds 63 characters: '%s'", value)
	case !labelChars(value):
		return fmt.Errorf("label value contains invalid characters (must be alphanumeric, '-', '_', or '.'): '%s'", value)
	}
	if first, last := alnumEnds(value); !first {
		return fmt.Errorf("label value must start with alphanumeric character: '%s'", value)
	} else if !last {
		return fmt.Errorf("label value must end with alphanumeric character: '%s'", value)
	}
	return nil
}

// validLabels checks a CreateSandbox request's labels. Upstream sets no
// limit on their number.
func validLabels(labels map[string]string) error {
	for k, v := range labels {
		if err := validLabelKey(k); err != nil {
			return err
		}
		if err := validLabelValue(v); err != nil {
			return err
		}
	}
	return nil
}

// parseSelector turns "k=v,k2=v2" into the labels a sandbox must carry.
// Pairs are trimmed, empty pairs (a trailing comma) skipped, a repeated key
// keeps its last value, and an empty or blank selector requires nothing.
func parseSelector(sel string) (map[string]string, error) {
	want := map[string]string{}
	n := 0
	for _, pair := range strings.Split(sel, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		if n++; n > maxLabelSelectorPairs {
			return nil, fmt.Errorf("label selector exceeds %d pair limit", maxLabelSelectorPairs)
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("invalid label selector: expected 'key=value', got '%s'", pair)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if k == "" {
			return nil, fmt.Errorf("invalid label selector: key cannot be empty in '%s'", pair)
		}
		if err := validLabelKey(k); err != nil {
			return nil, err
		}
		if err := validLabelValue(v); err != nil {
			return nil, err
		}
		want[k] = v
	}
	return want, nil
}

// matchSelector reports whether labels carry every required pair; "k=" needs
// k present with the empty value.
func matchSelector(want, labels map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
