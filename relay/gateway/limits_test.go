package gateway_test

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	datamodelv1 "github.com/ferry-dev/ferry/proto/openshell/datamodel/v1"
	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
	"github.com/ferry-dev/ferry/relay/gateway/gatewaytest"
)

// TestCreateSandboxLimits sends CreateSandbox requests past upstream's
// field limits (grpc/validation.rs validate_sandbox_spec and
// validate_annotations); each is refused with upstream's message and
// leaves no sandbox.
func TestCreateSandboxLimits(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	c, _ := rawClient(t, g)
	ctx := ctxFor(t)
	entries := func(n, size int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("K%d", i)] = strings.Repeat("v", size)
		}
		return m
	}
	spec := func(f func(*openshellv1.SandboxSpec)) *openshellv1.CreateSandboxRequest {
		s := &openshellv1.SandboxSpec{}
		f(s)
		return &openshellv1.CreateSandboxRequest{Spec: s, Name: "limited"}
	}
	template := func(f func(*openshellv1.SandboxTemplate)) *openshellv1.CreateSandboxRequest {
		return spec(func(s *openshellv1.SandboxSpec) {
			s.Template = &openshellv1.SandboxTemplate{}
			f(s.Template)
		})
	}
	for _, tc := range []struct {
		name string
		req  *openshellv1.CreateSandboxRequest
		msg  string
	}{
		{"NoSpec", &openshellv1.CreateSandboxRequest{Name: "limited"}, "spec is required"},
		{"NameCharsBeforeHyphen", &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "-A"}, "name must contain only lowercase alphanumeric characters or hyphens"},
		{"Providers", spec(func(s *openshellv1.SandboxSpec) { s.Providers = make([]string, 33) }), "providers list exceeds maximum (33 > 32)"},
		{"LogLevel", spec(func(s *openshellv1.SandboxSpec) { s.LogLevel = strings.Repeat("x", 33) }), "log_level exceeds maximum length (33 > 32)"},
		{"EnvEntries", spec(func(s *openshellv1.SandboxSpec) { s.Environment = entries(129, 1) }), "spec.environment exceeds maximum entries (129 > 128)"},
		{"EnvKeyLength", spec(func(s *openshellv1.SandboxSpec) { s.Environment = map[string]string{strings.Repeat("K", 257): ""} }), "spec.environment key exceeds maximum length (257 > 256)"},
		{"EnvValueLength", spec(func(s *openshellv1.SandboxSpec) { s.Environment = entries(1, 8193) }), "spec.environment value exceeds maximum length (8193 > 8192)"},
		{"EnvTotal", spec(func(s *openshellv1.SandboxSpec) { s.Environment = entries(40, 8000) }), "spec.environment total size exceeds 262144 byte limit"},
		{"EnvKeyShape", spec(func(s *openshellv1.SandboxSpec) { s.Environment = map[string]string{"1BAD": "v"} }), "spec.environment keys must match ^[A-Za-z_][A-Za-z0-9_]*$; got '1BAD'"},
		{"EnvReserved", spec(func(s *openshellv1.SandboxSpec) { s.Environment = map[string]string{"OPENSHELL_X": "v"} }), "spec.environment keys starting with OPENSHELL_ are reserved; got 'OPENSHELL_X'"},
		{"EnvNewline", spec(func(s *openshellv1.SandboxSpec) { s.Environment = map[string]string{"K": "a\nb"} }), "spec.environment value for 'K' contains newline or carriage return characters"},
		{"EnvNull", spec(func(s *openshellv1.SandboxSpec) { s.Environment = map[string]string{"K": "a\x00b"} }), "spec.environment value for 'K' contains null bytes"},
		{"TemplateImage", template(func(tp *openshellv1.SandboxTemplate) { tp.Image = strings.Repeat("i", 1025) }), "template.image exceeds maximum length (1025 > 1024)"},
		{"TemplateLabels", template(func(tp *openshellv1.SandboxTemplate) { tp.Labels = entries(129, 1) }), "template.labels exceeds maximum entries (129 > 128)"},
		{"TemplateEnvKey", template(func(tp *openshellv1.SandboxTemplate) { tp.Environment = map[string]string{"A-B": "v"} }), "spec.template.environment keys must match"},
		{"CommandEmpty", spec(func(s *openshellv1.SandboxSpec) { s.Command = []string{""} }), "spec.command[0] must not be empty"},
		{"CommandArgs", spec(func(s *openshellv1.SandboxSpec) { s.Command = make([]string, 257) }), "spec.command exceeds 256 argument limit"},
		{"CommandArg", spec(func(s *openshellv1.SandboxSpec) { s.Command = []string{"sh", strings.Repeat("x", 32<<10+1)} }), "spec.command[1] exceeds 32768 byte limit"},
		{"AnnotationValue", &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "limited", Annotations: entries(1, 8193)}, "annotations value exceeds maximum length (8193 > 8192)"},
		{"AnnotationEntries", &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "limited", Annotations: entries(129, 1)}, "annotations exceeds maximum entries (129 > 128)"},
		{"AnnotationKey", &openshellv1.CreateSandboxRequest{Spec: &openshellv1.SandboxSpec{}, Name: "limited", Annotations: map[string]string{"bad key": "v"}}, "label key name segment contains invalid characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.CreateSandbox(ctx, tc.req)
			wantStatus(t, err, codes.InvalidArgument, tc.msg)
		})
	}
	list, err := c.ListSandboxes(ctx, &openshellv1.ListSandboxesRequest{AllWorkspaces: true})
	if err != nil || len(list.GetSandboxes()) != 0 {
		t.Fatalf("after the refusals: %v, %v; want no sandbox", list.GetSandboxes(), err)
	}
	// At the limits, it is created; its 32 providers exist first, each
	// with a variable of its own.
	var providers []string
	for i := range 32 {
		name := fmt.Sprintf("p%d", i)
		if _, err := c.CreateProvider(ctx, &openshellv1.CreateProviderRequest{Provider: &datamodelv1.Provider{
			Metadata: &datamodelv1.ObjectMeta{Name: name}, Type: "generic", Credentials: map[string]string{fmt.Sprintf("TOKEN_%d", i): "v"},
		}}); err != nil {
			t.Fatal(err)
		}
		providers = append(providers, name)
	}
	createReady(t, c, &openshellv1.CreateSandboxRequest{
		Spec: &openshellv1.SandboxSpec{Environment: entries(31, 8192), LogLevel: strings.Repeat("x", 32), Command: []string{"/bin/bash", "-l"}, Providers: providers},
		Name: "limited", Annotations: entries(128, 8192/2),
	})
}
