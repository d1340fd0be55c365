package gateway

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// The cases are upstream's (openshell-server grpc/validation.rs and
// persistence/tests.rs at v0.0.111); msg is a fragment upstream's tests
// assert, "" for a value that must pass.

func TestLabelKey(t *testing.T) {
	for _, tc := range []struct{ key, msg string }{
		{"app", ""},
		{"my-app", ""},
		{"my_app", ""},
		{"my.app", ""},
		{"app123", ""},
		{"a1-b2_c3.d4", ""},
		{"kubernetes.io/app", ""},
		{"example.com/my-label", ""},
		{"sub.domain.example.com/name", ""},
		{"a.b/c", ""},
		{"a" + strings.Repeat("b", 61) + "z", ""},
		{"Ünïcode", ""}, // Rust's is_alphanumeric is Unicode-wide
		{"", "cannot be empty"},
		{"-app", "must start with alphanumeric"},
		{"app-", "must end with alphanumeric"},
		{"_app", "must start with alphanumeric"},
		{".app", "must start with alphanumeric"},
		{strings.Repeat("a", 64), "exceeds 63 characters"},
		{strings.Repeat("a", 250) + "/app", "exceeds 253 characters"},
		{"/app", "prefix cannot be empty"},
		{"kubernetes.io/", "name segment cannot be empty"},
		{"Example.com/app", "must be a DNS subdomain"},
		{"-example.com/app", "cannot start or end with '-' or '.'"},
		{"example.com./app", "cannot start or end with '-' or '.'"},
		{"example..com/app", "cannot contain consecutive dots"},
		{"app@name", "invalid characters"},
		{"a/b/c", "invalid characters"}, // the name after the first '/' holds a '/'
	} {
		t.Run(tc.key, func(t *testing.T) { wantErr(t, validLabelKey(tc.key), tc.msg) })
	}
}

func TestLabelValue(t *testing.T) {
	for _, tc := range []struct{ value, msg string }{
		{"", ""},
		{"prod", ""},
		{"my-value", ""},
		{"my_value", ""},
		{"my.value", ""},
		{"value123", ""},
		{"v1-2_3.4", ""},
		{"a" + strings.Repeat("b", 61) + "z", ""},
		{strings.Repeat("a", 64), "exceeds 63 characters"},
		{strings.Repeat("x", 512), "label value exceeds"},
		{"-value", "must start with alphanumeric"},
		{"value-", "must end with alphanumeric"},
		{"_value", "must start with alphanumeric"},
		{".value", "must start with alphanumeric"},
		{"value@123", "invalid characters"},
		{"a b", "invalid characters"},
	} {
		t.Run(tc.value, func(t *testing.T) { wantErr(t, validLabelValue(tc.value), tc.msg) })
	}
}

func TestParseSelector(t *testing.T) {
	var pairs []string
	for i := range 65 {
		pairs = append(pairs, fmt.Sprintf("k%d=v%d", i, i))
	}
	for _, tc := range []struct {
		sel  string
		want map[string]string
		msg  string
	}{
		{sel: "", want: map[string]string{}},
		{sel: "  ", want: map[string]string{}},
		{sel: ",", want: map[string]string{}},
		{sel: "env=prod", want: map[string]string{"env": "prod"}},
		{sel: "  env=prod  ", want: map[string]string{"env": "prod"}},
		{sel: "env=prod,team=platform", want: map[string]string{"env": "prod", "team": "platform"}},
		{sel: "env=prod, team=platform", want: map[string]string{"env": "prod", "team": "platform"}},
		{sel: "env=prod,tier=frontend,version=v1", want: map[string]string{"env": "prod", "tier": "frontend", "version": "v1"}},
		{sel: "env = prod , tier = frontend", want: map[string]string{"env": "prod", "tier": "frontend"}},
		{sel: "env=", want: map[string]string{"env": ""}},
		{sel: "app=,env=prod", want: map[string]string{"app": "", "env": "prod"}},
		{sel: "env=,tier=frontend", want: map[string]string{"env": "", "tier": "frontend"}},
		{sel: "env=prod,", want: map[string]string{"env": "prod"}},
		{sel: "kubernetes.io/app=web", want: map[string]string{"kubernetes.io/app": "web"}},
		{sel: "example.com/env=prod,team=platform", want: map[string]string{"example.com/env": "prod", "team": "platform"}},
		{sel: "grp=S,role=primary", want: map[string]string{"grp": "S", "role": "primary"}},
		{sel: "a=1,a=2", want: map[string]string{"a": "2"}}, // a HashMap insert: the last wins
		{sel: strings.Join(pairs[:64], ","), want: func() map[string]string {
			m := map[string]string{}
			for i := range 64 {
				m[fmt.Sprintf("k%d", i)] = fmt.Sprintf("v%d", i)
			}
			return m
		}()},
		{sel: "env:prod", msg: "invalid label selector: expected 'key=value', got 'env:prod'"},
		{sel: "env", msg: "expected 'key=value'"},
		{sel: "=prod", msg: "invalid label selector: key cannot be empty in '=prod'"},
		{sel: "=value", msg: "key cannot be empty"},
		{sel: "-app=prod", msg: "must start with alphanumeric"},
		{sel: "env=-prod", msg: "must start with alphanumeric"},
		{sel: "env=a=b", msg: "label value contains invalid characters"},
		{sel: strings.Repeat("a", 64) + "=value", msg: "exceeds 63 characters"},
		{sel: "key=" + strings.Repeat("a", 64), msg: "exceeds 63 characters"},
		{sel: strings.Join(pairs, ","), msg: "label selector exceeds 64 pair limit"},
	} {
		t.Run(tc.sel, func(t *testing.T) {
			got, err := parseSelector(tc.sel)
			wantErr(t, err, tc.msg)
			if tc.msg == "" && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("parseSelector(%q) = %v, want %v", tc.sel, got, tc.want)
			}
		})
	}
}

func TestMatchSelector(t *testing.T) {
	primary := map[string]string{"aiq-test": "s1", "role": "primary"}
	for _, tc := range []struct {
		sel    string
		labels map[string]string
		want   bool
	}{
		{"", nil, true},
		{",", primary, true},
		{"aiq-test=s1", primary, true},
		{"aiq-test=s1,role=primary", primary, true},
		{"aiq-test=s1,role=secondary", primary, false},
		{"aiq-test=s2", primary, false},
		{"other=x", primary, false},
		{"role=", primary, false},
		{"role=", map[string]string{"role": ""}, true},
		{"role=", nil, false}, // an empty value still needs the key
		{"Role=primary", primary, false},
		{"role=Primary", primary, false},
	} {
		t.Run(tc.sel, func(t *testing.T) {
			want, err := parseSelector(tc.sel)
			if err != nil {
				t.Fatal(err)
			}
			if got := matchSelector(want, tc.labels); got != tc.want {
				t.Fatalf("selector %q on %v = %v, want %v", tc.sel, tc.labels, got, tc.want)
			}
		})
	}
}

func wantErr(t *testing.T, err error, msg string) {
	t.Helper()
	switch {
	case msg == "" && err != nil:
		t.Fatalf("want success, got %v", err)
	case msg != "" && err == nil:
		t.Fatalf("want an error with %q, got success", msg)
	case msg != "" && !strings.Contains(err.Error(), msg):
		t.Fatalf("want an error with %q, got %v", msg, err)
	}
}

// FuzzParseSelector: a client's selector never panics the gateway, what
// it accepts holds only valid labels and matches a sandbox carrying
// exactly them, and the selector written back from them parses the same.
func FuzzParseSelector(f *testing.F) {
	for _, s := range []string{"", "grp=S,role=primary", "role=secondary,", "a/b=c", " k = v ", "=x", "k", "a=b,,c=d", strings.Repeat("k=v,", 30)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sel string) {
		want, err := parseSelector(sel)
		if err != nil {
			return
		}
		if err := validLabels(want); err != nil {
			t.Fatalf("parseSelector(%q) accepted labels validLabels refuses: %v", sel, err)
		}
		if !matchSelector(want, want) {
			t.Fatalf("parseSelector(%q) = %v does not match itself", sel, want)
		}
		var pairs []string
		for k, v := range want {
			pairs = append(pairs, k+"="+v)
		}
		again, err := parseSelector(strings.Join(pairs, ","))
		if err != nil || !reflect.DeepEqual(again, want) {
			t.Fatalf("written back, %v parses as %v, %v", want, again, err)
		}
	})
}
