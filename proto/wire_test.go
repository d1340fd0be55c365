package proto_test

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	datamodelv1 "github.com/ferry-dev/ferry/proto/openshell/datamodel/v1"
	sandboxv1 "github.com/ferry-dev/ferry/proto/openshell/sandbox/v1"
	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
)

// wireFile lists every upstream field, enum value and rpc, one a line, in the
// format that renderFile produces. It is reference data read from upstream's
// proto files, so a mismatch here means our schema drifted, not the file.
var wireFile = filepath.Join("..", "testdata", "openshell-wire.txt")

// ourFiles are the schema files ferry declares; every fact in them must be an
// upstream fact.
var ourFiles = []protoreflect.FileDescriptor{
	datamodelv1.File_openshell_datamodel_v1_datamodel_proto,
	sandboxv1.File_openshell_sandbox_v1_sandbox_proto,
	openshellv1.File_openshell_v1_openshell_proto,
}

// requiredRPCs are the calls ferry's client or its embedded gateway use;
// dropping one from the schema would only surface as a compile error far
// away, so it is caught here.
var requiredRPCs = []string{
	"Health", "GetGatewayInfo",
	"CreateSandbox", "GetSandbox", "ListSandboxes", "DeleteSandbox",
	"StartSandbox", "StopSandbox", "WatchSandbox",
	"ExecSandbox", "ExecSandboxInteractive",
	"CreateSshSession", "RevokeSshSession", "ForwardTcp",
	"GetSandboxLogs",
	"CreateWorkspace", "GetWorkspace", "ListWorkspaces", "DeleteWorkspace",
	"CreateProvider", "GetProvider", "ListProviders", "UpdateProvider", "DeleteProvider",
}

func loadWire(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open(wireFile)
	if err != nil {
		t.Fatalf("open wire file: %v", err)
	}
	defer f.Close()
	lines := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		lines[line] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read wire file: %v", err)
	}
	if len(lines) == 0 {
		t.Fatalf("wire file %s has no facts", wireFile)
	}
	return lines
}

// renderFile lists the wire facts that fd declares, in the wire file's line
// format. names collects every message and enum it declares, so the caller
// can check that those with no lines of their own (empty messages) exist
// upstream too.
func renderFile(fd protoreflect.FileDescriptor) (lines, names []string) {
	var walkMessages func(protoreflect.MessageDescriptors)
	var walkEnums func(protoreflect.EnumDescriptors)
	walkEnums = func(es protoreflect.EnumDescriptors) {
		for i := range es.Len() {
			e := es.Get(i)
			names = append(names, string(e.FullName()))
			for j := range e.Values().Len() {
				v := e.Values().Get(j)
				lines = append(lines, fmt.Sprintf("%s value %s=%d", e.FullName(), v.Name(), v.Number()))
			}
		}
	}
	walkMessages = func(ms protoreflect.MessageDescriptors) {
		for i := range ms.Len() {
			m := ms.Get(i)
			// Map entries are rendered as the map field's type, not as
			// messages of their own.
			if m.IsMapEntry() {
				continue
			}
			names = append(names, string(m.FullName()))
			for j := range m.Fields().Len() {
				lines = append(lines, renderField(m.Fields().Get(j)))
			}
			walkEnums(m.Enums())
			walkMessages(m.Messages())
		}
	}
	walkEnums(fd.Enums())
	walkMessages(fd.Messages())
	for i := range fd.Services().Len() {
		s := fd.Services().Get(i)
		for j := range s.Methods().Len() {
			m := s.Methods().Get(j)
			lines = append(lines, fmt.Sprintf("%s/%s rpc in=%s client_stream=%t out=%s server_stream=%t",
				s.FullName(), m.Name(), m.Input().FullName(), m.IsStreamingClient(), m.Output().FullName(), m.IsStreamingServer()))
		}
	}
	return lines, names
}

func renderField(f protoreflect.FieldDescriptor) string {
	oneof := f.ContainingOneof()
	label := "optional"
	switch {
	case f.IsMap():
		label = "map"
	case f.Cardinality() == protoreflect.Repeated:
		label = "repeated"
	case oneof != nil && oneof.IsSynthetic():
		// proto3 `optional` is a one-field synthetic oneof in the
		// descriptor; the wire file names the label instead of the oneof.
		label = "proto3optional"
	}
	typ := typeName(f)
	if f.IsMap() {
		typ = fmt.Sprintf("map<%s,%s>", typeName(f.MapKey()), typeName(f.MapValue()))
	}
	line := fmt.Sprintf("%s field %d %s %s %s", f.ContainingMessage().FullName(), f.Number(), f.Name(), label, typ)
	if oneof != nil && !oneof.IsSynthetic() {
		line += " oneof=" + string(oneof.Name())
	}
	return line
}

func typeName(f protoreflect.FieldDescriptor) string {
	switch f.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return string(f.Message().FullName())
	case protoreflect.EnumKind:
		return string(f.Enum().FullName())
	default:
		return f.Kind().String()
	}
}

func TestWireMatchesUpstream(t *testing.T) {
	wire := loadWire(t)

	// Names mentioned anywhere in the wire file, as a line's subject or as a
	// type; an empty message we declare must be one of them.
	known := map[string]bool{}
	for line := range wire {
		for _, tok := range strings.FieldsFunc(line, func(r rune) bool {
			return r == ' ' || r == '=' || r == '/' || r == '<' || r == '>' || r == ','
		}) {
			known[tok] = true
		}
	}

	for _, fd := range ourFiles {
		t.Run(fd.Path(), func(t *testing.T) {
			lines, names := renderFile(fd)
			if len(lines) == 0 {
				t.Fatalf("%s declares no fields, enum values or rpcs", fd.Path())
			}
			var bad []string
			for _, line := range lines {
				if !wire[line] {
					bad = append(bad, line)
				}
			}
			if len(bad) > 0 {
				t.Errorf("%d declarations of %s are not in %s (wrong name, number, type, label or oneof?):\n  %s",
					len(bad), fd.Path(), wireFile, strings.Join(bad, "\n  "))
			}
			var unknown []string
			for _, name := range names {
				if !known[name] {
					unknown = append(unknown, name)
				}
			}
			if len(unknown) > 0 {
				t.Errorf("%s declares types that upstream does not have:\n  %s", fd.Path(), strings.Join(unknown, "\n  "))
			}
		})
	}
}

func TestRequiredRPCsDeclared(t *testing.T) {
	svc := openshellv1.File_openshell_v1_openshell_proto.Services().ByName("OpenShell")
	if svc == nil {
		t.Fatal("service openshell.v1.OpenShell is not declared")
	}
	var missing []string
	for _, name := range requiredRPCs {
		if svc.Methods().ByName(protoreflect.Name(name)) == nil {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		t.Errorf("openshell.v1.OpenShell lacks rpcs: %s", strings.Join(missing, ", "))
	}
}

// TestRenderFormat pins the renderer against hand-written lines from the wire
// file, so a renderer bug cannot make TestWireMatchesUpstream pass or fail
// for the wrong reason.
func TestRenderFormat(t *testing.T) {
	lines := map[string]bool{}
	for _, fd := range ourFiles {
		l, _ := renderFile(fd)
		for _, line := range l {
			lines[line] = true
		}
	}
	for _, want := range []string{
		"openshell.v1.ExecSandboxRequest field 4 environment map map<string,string>",
		"openshell.v1.ExecSandboxRequest field 2 command repeated string",
		"openshell.v1.ExecSandboxInput field 2 stdin optional bytes oneof=payload",
		"openshell.v1.SandboxTemplate field 10 user_namespaces proto3optional bool",
		"openshell.v1.SandboxTemplate field 7 resources optional google.protobuf.Struct",
		"openshell.v1.SandboxStatus field 6 phase optional openshell.v1.SandboxPhase",
		"openshell.v1.SandboxPhase value SANDBOX_PHASE_READY=2",
		"openshell.datamodel.v1.ObjectMeta field 5 resource_version optional uint64",
		"openshell.v1.OpenShell/ExecSandboxInteractive rpc in=openshell.v1.ExecSandboxInput client_stream=true out=openshell.v1.ExecSandboxEvent server_stream=true",
	} {
		if !lines[want] {
			t.Errorf("renderer did not produce %q", want)
		}
	}
	// A synthetic oneof must never leak into a rendered line.
	for line := range lines {
		if strings.Contains(line, "oneof=_") {
			t.Errorf("synthetic oneof rendered: %s", line)
		}
	}
	if t.Failed() {
		t.Logf("rendered lines:\n  %s", strings.Join(slices.Sorted(maps.Keys(lines)), "\n  "))
	}
}
