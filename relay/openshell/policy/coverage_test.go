package policy_test

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ferry-dev/ferry/relay/openshell/policy"
)

// notInYAML are the SandboxPolicy fields upstream's YAML cannot name:
// markers only a gateway sets, and a deprecated one it ignores.
var notInYAML = map[protoreflect.FullName]bool{
	"openshell.sandbox.v1.NetworkEndpoint.advisor_proposed":      true,
	"openshell.sandbox.v1.NetworkEndpoint.provider_credentialed": true,
	"openshell.sandbox.v1.NetworkBinary.harness":                 true,
}

// TestEveryFieldCovered: the everyField document sets every field of
// every message under SandboxPolicy that YAML can name, so a field added
// to the proto without a parser key fails here.
func TestEveryFieldCovered(t *testing.T) {
	p, err := policy.Parse([]byte(everyField))
	if err != nil {
		t.Fatal(err)
	}
	set := map[protoreflect.FullName]bool{}
	var walk func(m protoreflect.Message)
	walk = func(m protoreflect.Message) {
		if m.Descriptor().FullName().Parent() != "openshell.sandbox.v1" {
			return // google.protobuf.Struct: free-form config
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			set[fd.FullName()] = true
			switch {
			case fd.IsMap() && fd.MapValue().Message() != nil:
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool { walk(mv.Message()); return true })
			case fd.IsList() && fd.Message() != nil:
				for i := 0; i < v.List().Len(); i++ {
					walk(v.List().Get(i).Message())
				}
			case fd.Message() != nil && !fd.IsMap() && !fd.IsList():
				walk(v.Message())
			}
			return true
		})
	}
	walk(p.Proto().ProtoReflect())

	seen := map[protoreflect.FullName]bool{}
	var check func(md protoreflect.MessageDescriptor)
	check = func(md protoreflect.MessageDescriptor) {
		if seen[md.FullName()] || md.FullName().Parent() != "openshell.sandbox.v1" {
			return
		}
		seen[md.FullName()] = true
		for i := 0; i < md.Fields().Len(); i++ {
			fd := md.Fields().Get(i)
			if !set[fd.FullName()] && !notInYAML[fd.FullName()] {
				t.Errorf("%s is set by no key of everyField", fd.FullName())
			}
			if fd.IsMap() {
				fd = fd.MapValue()
			}
			if fd.Message() != nil {
				check(fd.Message())
			}
		}
	}
	check(p.Proto().ProtoReflect().Descriptor())
	if len(seen) < 10 {
		t.Fatalf("walked only %d messages", len(seen))
	}
}
