package openshell

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	openshellv1 "github.com/ferry-dev/ferry/proto/openshell/v1"
)

// Resources are the compute a sandbox may use: what upstream's
// `openshell sandbox create --cpu --memory --gpu` sets. CPU and memory go
// into SandboxTemplate.resources as Kubernetes quantities
// ({"limits": {"cpu", "memory"}, "requests": {...}}), the shape every
// upstream driver reads; a GPU into SandboxSpec.resource_requirements.
// The zero value asks for nothing: the gateway's defaults.
type Resources struct {
	// CPULimit is cores ("2", "0.5") or millicores ("500m").
	CPULimit string
	// MemoryLimit is bytes ("4294967296") or a quantity ("4Gi", "512Mi",
	// "8G").
	MemoryLimit string
	// CPURequest and MemoryRequest are the Kubernetes driver's requests;
	// upstream's Docker driver refuses them.
	CPURequest, MemoryRequest string
	// GPU asks for GPUs; GPUCount is how many, 0 the driver's default
	// assignment (one).
	GPU      bool
	GPUCount uint32
}

// IsZero reports whether r asks for nothing.
func (r Resources) IsZero() bool { return r == Resources{} }

// ResourceError is a quantity upstream's CLI would refuse.
type ResourceError struct {
	// Field is "cpu_limit", "memory_limit", "cpu_request" or "memory_request".
	Field string
	Value string
	Msg   string
}

func (e *ResourceError) Error() string {
	return fmt.Sprintf("resources %s %q: %s", e.Field, e.Value, e.Msg)
}

// Check refuses a quantity upstream's CLI refuses (validate_cpu_quantity,
// validate_memory_quantity): a gateway would take it and its driver fail
// the sandbox later, far from the configuration at fault.
func (r Resources) Check() error {
	for _, q := range []struct {
		field, v string
		check    func(string) string
	}{
		{"cpu_limit", r.CPULimit, checkCPU}, {"memory_limit", r.MemoryLimit, checkMemory},
		{"cpu_request", r.CPURequest, checkCPU}, {"memory_request", r.MemoryRequest, checkMemory},
	} {
		if q.v == "" {
			continue
		}
		if msg := q.check(q.v); msg != "" {
			return &ResourceError{Field: q.field, Value: q.v, Msg: msg}
		}
	}
	if r.GPUCount > 0 && !r.GPU {
		return &ResourceError{Field: "gpu_count", Value: strconv.FormatUint(uint64(r.GPUCount), 10), Msg: "a GPU count without GPU"}
	}
	return nil
}

func checkCPU(v string) string {
	const want = "expected positive cores or millicores, for example 2, 0.5, or 500m"
	if m, ok := strings.CutSuffix(v, "m"); ok {
		if m == "" || strings.Trim(m, "0123456789") != "" {
			return want
		}
		if n, err := strconv.ParseUint(m, 10, 64); err != nil || n == 0 {
			return "must be greater than zero"
		}
		return ""
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return want
	}
	if math.IsInf(f, 0) || math.IsNaN(f) || f <= 0 {
		return "must be greater than zero"
	}
	return ""
}

func checkMemory(v string) string {
	i := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		i = len(v)
	}
	num, suffix := v[:i], v[i:]
	switch suffix {
	case "", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "K", "M", "G", "T", "P", "E":
	default:
		return "expected positive bytes or a quantity such as 512Mi, 4Gi, or 8G"
	}
	if num == "" {
		return "expected positive bytes or a quantity such as 512Mi, 4Gi, or 8G"
	}
	if strings.Trim(num, "0") == "" {
		return "must be greater than zero"
	}
	return ""
}

// template is r's SandboxTemplate.resources; nil when r sets no quantity.
func (r Resources) template() *structpb.Struct {
	section := func(cpu, mem string) *structpb.Value {
		f := map[string]*structpb.Value{}
		if cpu != "" {
			f["cpu"] = structpb.NewStringValue(cpu)
		}
		if mem != "" {
			f["memory"] = structpb.NewStringValue(mem)
		}
		if len(f) == 0 {
			return nil
		}
		return structpb.NewStructValue(&structpb.Struct{Fields: f})
	}
	fields := map[string]*structpb.Value{}
	if v := section(r.CPULimit, r.MemoryLimit); v != nil {
		fields["limits"] = v
	}
	if v := section(r.CPURequest, r.MemoryRequest); v != nil {
		fields["requests"] = v
	}
	if len(fields) == 0 {
		return nil
	}
	return &structpb.Struct{Fields: fields}
}

// requirements is r's SandboxSpec.resource_requirements; nil without a GPU.
func (r Resources) requirements() *openshellv1.ResourceRequirements {
	if !r.GPU {
		return nil
	}
	gpu := &openshellv1.GpuResourceRequirements{}
	if r.GPUCount > 0 {
		n := r.GPUCount
		gpu.Count = &n
	}
	return &openshellv1.ResourceRequirements{Gpu: gpu}
}

// resourcesOf reads a sandbox's spec back into Resources: the quantities
// as upstream's gateway reads them (string values only), the GPU request.
func resourcesOf(spec *openshellv1.SandboxSpec) Resources {
	var r Resources
	get := func(section, key string) string {
		s := spec.GetTemplate().GetResources().GetFields()[section].GetStructValue()
		return s.GetFields()[key].GetStringValue()
	}
	r.CPULimit, r.MemoryLimit = get("limits", "cpu"), get("limits", "memory")
	r.CPURequest, r.MemoryRequest = get("requests", "cpu"), get("requests", "memory")
	if g := spec.GetResourceRequirements().GetGpu(); g != nil {
		r.GPU, r.GPUCount = true, g.GetCount()
	}
	return r
}
