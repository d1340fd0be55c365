package gateway

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
)

// CreateSandbox's field limits are upstream's (openshell-server grpc/mod.rs
// constants and grpc/validation.rs validate_sandbox_spec,
// validate_annotations at v0.0.111), checked in its order with its
// messages. The GPU count check is left out: the embedded gateway has no
// GPUs to count.
const (
	maxProviders        = 32
	maxLogLevelLen      = 32
	maxEnvEntries       = 128
	maxMapKeyLen        = 256
	maxMapValueLen      = 8192
	maxTemplateString   = 1024
	maxTemplateEntries  = 128
	maxAnnotations      = 128
	maxTemplateStruct   = 65536
	maxPolicySize       = 262144
	maxEnvSerialized    = 256 << 10
	maxMainProcessArgs  = 256
	maxMainProcessArgv  = 256 << 10
	maxMainProcessArgLn = 32 << 10
)

// validCreate checks a CreateSandboxRequest's fields before anything is
// looked up, as upstream's handle_create_sandbox does.
func validCreate(req *openshellv1.CreateSandboxRequest) error {
	spec := req.GetSpec()
	if spec == nil {
		return errors.New("spec is required")
	}
	if name := req.GetName(); name != "" {
		if err := validName(name); err != nil {
			return err
		}
	}
	if n := len(spec.GetProviders()); n > maxProviders {
		return fmt.Errorf("providers list exceeds maximum (%d > %d)", n, maxProviders)
	}
	if n := len(spec.GetLogLevel()); n > maxLogLevelLen {
		return fmt.Errorf("log_level exceeds maximum length (%d > %d)", n, maxLogLevelLen)
	}
	if err := validStringMap(spec.GetEnvironment(), maxEnvEntries, "spec.environment"); err != nil {
		return err
	}
	if err := validEnv(spec.GetEnvironment(), "spec.environment"); err != nil {
		return err
	}
	if t := spec.GetTemplate(); t != nil {
		for _, f := range []struct{ name, v string }{
			{"template.image", t.GetImage()},
			{"template.runtime_class_name", t.GetRuntimeClassName()},
			{"template.agent_socket", t.GetAgentSocket()},
		} {
			if len(f.v) > maxTemplateString {
				return fmt.Errorf("%s exceeds maximum length (%d > %d)", f.name, len(f.v), maxTemplateString)
			}
		}
		for _, m := range []struct {
			name string
			m    map[string]string
		}{{"template.labels", t.GetLabels()}, {"template.annotations", t.GetAnnotations()}, {"template.environment", t.GetEnvironment()}} {
			if err := validStringMap(m.m, maxTemplateEntries, m.name); err != nil {
				return err
			}
		}
		for _, f := range []struct {
			name string
			size int
		}{{"template.resources", proto.Size(t.GetResources())}, {"template.driver_config", proto.Size(t.GetDriverConfig())}} {
			if f.size > maxTemplateStruct {
				return fmt.Errorf("%s serialized size exceeds maximum (%d > %d)", f.name, f.size, maxTemplateStruct)
			}
		}
		if err := validEnv(t.GetEnvironment(), "spec.template.environment"); err != nil {
			return err
		}
	}
	if err := validMainCommand(spec.GetCommand()); err != nil {
		return err
	}
	if p := spec.GetPolicy(); p != nil {
		if n := proto.Size(p); n > maxPolicySize {
			return fmt.Errorf("policy serialized size exceeds maximum (%d > %d)", n, maxPolicySize)
		}
	}
	if err := validLabels(req.GetLabels()); err != nil {
		return err
	}
	if err := validStringMap(req.GetAnnotations(), maxAnnotations, "annotations"); err != nil {
		return err
	}
	for k := range req.GetAnnotations() {
		if err := validLabelKey(k); err != nil {
			return err
		}
	}
	return nil
}

// validStringMap is upstream's validate_string_map with its usual bounds.
func validStringMap(m map[string]string, maxEntries int, field string) error {
	if len(m) > maxEntries {
		return fmt.Errorf("%s exceeds maximum entries (%d > %d)", field, len(m), maxEntries)
	}
	for k, v := range m {
		if len(k) > maxMapKeyLen {
			return fmt.Errorf("%s key exceeds maximum length (%d > %d)", field, len(k), maxMapKeyLen)
		}
		if len(v) > maxMapValueLen {
			return fmt.Errorf("%s value exceeds maximum length (%d > %d)", field, len(v), maxMapValueLen)
		}
	}
	return nil
}

// validEnv is upstream's validate_env_entries: the sandbox environment
// travels to the sandbox as one serialized variable, hence the total.
func validEnv(m map[string]string, field string) error {
	total := 0
	for k, v := range m {
		total += len(k) + len(v)
	}
	if total > maxEnvSerialized {
		return fmt.Errorf("%s total size exceeds %d byte limit (%d bytes)", field, maxEnvSerialized, total)
	}
	for k, v := range m {
		switch {
		case !envKey(k):
			return fmt.Errorf("%s keys must match ^[A-Za-z_][A-Za-z0-9_]*$; got '%s'", field, k)
		case strings.HasPrefix(k, "OPENSHELL_"):
			return fmt.Errorf("%s keys starting with OPENSHELL_ are reserved; got '%s'", field, k)
		case strings.IndexByte(v, 0) >= 0:
			return fmt.Errorf("%s value for '%s' contains null bytes", field, k)
		case strings.ContainsAny(v, "\r\n"):
			return fmt.Errorf("%s value for '%s' contains newline or carriage return characters", field, k)
		}
	}
	return nil
}

func envKey(k string) bool {
	if k == "" {
		return false
	}
	for i, r := range k {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// validMainCommand is upstream's validate_main_process_command, for a
// spec that names one.
func validMainCommand(argv []string) error {
	if len(argv) == 0 {
		return nil
	}
	if len(argv) > maxMainProcessArgs {
		return fmt.Errorf("spec.command exceeds %d argument limit", maxMainProcessArgs)
	}
	if argv[0] == "" {
		return errors.New("spec.command[0] must not be empty")
	}
	total := 0
	for _, a := range argv {
		total += len(a)
	}
	if total > maxMainProcessArgv {
		return fmt.Errorf("spec.command total size exceeds %d byte limit", maxMainProcessArgv)
	}
	for i, a := range argv {
		if len(a) > maxMainProcessArgLn {
			return fmt.Errorf("spec.command[%d] exceeds %d byte limit", i, maxMainProcessArgLn)
		}
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("spec.command[%d] contains null bytes", i)
		}
	}
	return nil
}
