package openshell_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
	"github.com/ferry-dev/ferry/relay/openshell"
)

func TestLabelValue(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"run_0123456789abcdef", "run_0123456789abcdef"},
		{"true", "true"},
		{"a.b-c_d", "a.b-c_d"},
		// Not label values: the readable part, "-", 8 hex digits of the
		// value's SHA-256.
		{"rtzll/rascal", "rtzll_rascal-"},
		{"-lead", "lead-"},
		{"trail.", "trail-"},
		{"über", "ber-"},
		{"///", ""},
		{strings.Repeat("x", 64), strings.Repeat("x", 54) + "-"},
	} {
		got := openshell.LabelValue(tc.in)
		if !openshell.ValidLabelValue(got) {
			t.Errorf("LabelValue(%q) = %q: not a label value", tc.in, got)
		}
		if openshell.ValidLabelValue(tc.in) {
			if got != tc.want {
				t.Errorf("LabelValue(%q) = %q, want it as it is", tc.in, got)
			}
			continue
		}
		if !strings.HasPrefix(got, tc.want) || len(got) != len(tc.want)+8 {
			t.Errorf("LabelValue(%q) = %q, want %q and 8 hex digits", tc.in, got, tc.want)
		}
		if openshell.LabelValue(tc.in) != got {
			t.Errorf("LabelValue(%q) is not the same twice", tc.in)
		}
	}
	if openshell.LabelValue("rtzll/rascal") == openshell.LabelValue("rtzll_rascal") || openshell.LabelValue("a/b") == openshell.LabelValue("a:b") {
		t.Error("two values that differ give one label")
	}
	for _, k := range []string{"rascal.run_id", "ferry.managed", "example.com/team"} {
		if err := openshell.CheckLabelKey(k); err != nil {
			t.Errorf("CheckLabelKey(%q): %v", k, err)
		}
	}
	for _, k := range []string{"", "-x", "x/", "/x", "Ex.com/x", "a b", strings.Repeat("k", 64)} {
		if err := openshell.CheckLabelKey(k); err == nil {
			t.Errorf("CheckLabelKey(%q) accepted", k)
		}
	}
}

func TestResourcesCheck(t *testing.T) {
	for _, tc := range []struct {
		r     openshell.Resources
		field string // "" is valid
	}{
		{openshell.Resources{}, ""},
		{openshell.Resources{CPULimit: "2", MemoryLimit: "4Gi"}, ""},
		{openshell.Resources{CPULimit: "0.5", MemoryLimit: "8G", CPURequest: "500m", MemoryRequest: "4294967296"}, ""},
		{openshell.Resources{GPU: true, GPUCount: 2}, ""},
		{openshell.Resources{CPULimit: "0"}, "cpu_limit"},
		{openshell.Resources{CPULimit: "two"}, "cpu_limit"},
		{openshell.Resources{CPULimit: "0m"}, "cpu_limit"},
		{openshell.Resources{CPURequest: "1.5m"}, "cpu_request"},
		{openshell.Resources{MemoryLimit: "4g"}, "memory_limit"},
		{openshell.Resources{MemoryLimit: "0Gi"}, "memory_limit"},
		{openshell.Resources{MemoryRequest: "Gi"}, "memory_request"},
		{openshell.Resources{GPUCount: 1}, "gpu_count"},
	} {
		err := tc.r.Check()
		var re *openshell.ResourceError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%+v: %v", tc.r, err)
		case tc.field != "" && (!errors.As(err, &re) || re.Field != tc.field):
			t.Errorf("%+v: %v, want a ResourceError on %s", tc.r, err, tc.field)
		}
	}
}

// TestResourcesRoundTrip: resources go where upstream's CLI puts them
// (template.resources' limits and requests, resource_requirements.gpu)
// and come back from GetSandbox.
func TestResourcesRoundTrip(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	res := openshell.Resources{CPULimit: "2", MemoryLimit: "4Gi", CPURequest: "500m", GPU: true, GPUCount: 1}
	got := openshell.CreateRequest(c, openshell.Spec{Name: "res", Resources: res})
	one := uint32(1)
	want := &openshellv1.CreateSandboxRequest{Name: "res", Workspace: "default", Spec: &openshellv1.SandboxSpec{
		Template: &openshellv1.SandboxTemplate{Resources: &structpb.Struct{Fields: map[string]*structpb.Value{
			"limits": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				"cpu": structpb.NewStringValue("2"), "memory": structpb.NewStringValue("4Gi"),
			}}),
			"requests": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				"cpu": structpb.NewStringValue("500m"),
			}}),
		}}},
		ResourceRequirements: &openshellv1.ResourceRequirements{Gpu: &openshellv1.GpuResourceRequirements{Count: &one}},
	}}
	if !proto.Equal(got, want) {
		o := prototext.MarshalOptions{Multiline: true}
		t.Fatalf("request:\n%s\nwant:\n%s", o.Format(got), o.Format(want))
	}
	if _, err := c.Create(ctxFor(t), openshell.Spec{Name: "res", Resources: res}); err != nil {
		t.Fatal(err)
	}
	info, err := c.Get(ctxFor(t), "res")
	if err != nil {
		t.Fatal(err)
	}
	if info.Resources != res {
		t.Fatalf("GetSandbox's resources %+v, want %+v", info.Resources, res)
	}
}

// TestEnsureRefusesForeign: a sandbox of the name, made without the
// labels Match names or with other values, is refused before any wait and
// left as it is; one with them is reused; no second create is sent.
func TestEnsureRefusesForeign(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c := g.Client(t, openshell.Config{})
	ctx := ctxFor(t)
	spec := func(name, run string) openshell.Spec {
		return openshell.Spec{Name: name, Labels: map[string]string{"rascal.run_id": run}, Match: []string{"rascal.run_id"}}
	}
	if _, err := c.Create(ctx, openshell.Spec{Name: "bare"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ensure(ctx, spec("mine", "r1")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, run, got string
	}{{"bare", "r1", ""}, {"mine", "r2", "r1"}} {
		_, err := c.Ensure(ctx, spec(tc.name, tc.run))
		var fe *openshell.ForeignError
		if !errors.As(err, &fe) || fe.Sandbox != tc.name || fe.Key != "rascal.run_id" || fe.Want != tc.run || fe.Got != tc.got {
			t.Fatalf("Ensure %s for %s: %v, want a ForeignError", tc.name, tc.run, err)
		}
		if !errors.Is(err, openshell.ErrExists) || !strings.Contains(err.Error(), "sandbox "+tc.name) {
			t.Errorf("error %q: not ErrExists or not naming the sandbox", err)
		}
	}
	info, err := c.Ensure(ctx, spec("mine", "r1"))
	if err != nil || info.Labels["rascal.run_id"] != "r1" {
		t.Fatalf("Ensure of its own sandbox again: %+v %v", info, err)
	}
	if n := len(g.Creates()); n != 2 {
		t.Errorf("%d creates sent, want 2 (bare, mine)", n)
	}
}
