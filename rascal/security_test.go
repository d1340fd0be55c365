package rascal

import (
	"testing"

	"github.com/ferry-dev/ferry/relay/openshell"
)

func TestDockerSecurityResources(t *testing.T) {
	for _, tc := range []struct {
		sec  DockerSecurityConfig
		want openshell.Resources
		bad  bool
	}{
		{DockerSecurityConfig{}, openshell.Resources{}, false},
		{DockerSecurityConfig{CPUs: "2", Memory: "4g"}, openshell.Resources{CPULimit: "2", MemoryLimit: "4Gi"}, false},
		{DockerSecurityConfig{Mode: "strict", CPUs: "3.5", Memory: "512m"}, openshell.Resources{CPULimit: "3.5", MemoryLimit: "512Mi"}, false},
		{DockerSecurityConfig{Mode: "baseline", Memory: "1024K"}, openshell.Resources{MemoryLimit: "1024Ki"}, false},
		{DockerSecurityConfig{Memory: "6GB"}, openshell.Resources{MemoryLimit: "6Gi"}, false},
		{DockerSecurityConfig{Memory: "1.5g"}, openshell.Resources{MemoryLimit: "1610612736"}, false},
		{DockerSecurityConfig{Memory: "1048576"}, openshell.Resources{MemoryLimit: "1048576"}, false},
		// Open mode: Docker sets no limit.
		{DockerSecurityConfig{Mode: "open", CPUs: "2", Memory: "4g"}, openshell.Resources{}, false},
		// PidsLimit, TmpfsTmpSize and AllowEnvSecrets have no sandbox
		// equivalent.
		{DockerSecurityConfig{PidsLimit: 256, TmpfsTmpSize: "512m", AllowEnvSecrets: true}, openshell.Resources{}, false},
		{DockerSecurityConfig{Memory: "lots"}, openshell.Resources{}, true},
		{DockerSecurityConfig{Memory: "0g"}, openshell.Resources{}, true},
		{DockerSecurityConfig{CPUs: "-1"}, openshell.Resources{}, true},
	} {
		got, err := tc.sec.resources()
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("%+v: %+v %v, want %+v (error: %v)", tc.sec, got, err, tc.want, tc.bad)
		}
	}
}

func TestCoverage(t *testing.T) {
	for _, tc := range []struct {
		providers []string
		types     map[string]string
		want      []string
	}{
		{nil, nil, nil},
		{[]string{"github"}, nil, []string{"gh_token"}},
		{[]string{"my-gh"}, map[string]string{"my-gh": "github"}, []string{"gh_token"}},
		{[]string{"my-gh"}, nil, nil},
		{[]string{"claude"}, nil, []string{"claude_oauth_token"}},
		{[]string{"claude-code"}, nil, []string{"claude_oauth_token"}},
		{[]string{"anthropic"}, nil, []string{"claude_oauth_token"}},
		{[]string{"codex"}, nil, []string{"codex_auth.json"}},
		{[]string{"openai", "github"}, nil, []string{"codex_auth.json", "gh_token"}},
		{[]string{"nvidia"}, nil, nil},
	} {
		got := Coverage(tc.providers, tc.types)
		if len(got) != len(tc.want) {
			t.Errorf("Coverage(%v, %v) = %v, want %v", tc.providers, tc.types, got, tc.want)
			continue
		}
		for _, s := range tc.want {
			if !got[s] {
				t.Errorf("Coverage(%v, %v) = %v, want %v", tc.providers, tc.types, got, tc.want)
			}
		}
	}
}
