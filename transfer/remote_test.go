package transfer_test

import (
	"testing"

	"github.com/ferry-dev/ferry/transfer"
	"github.com/ferry-dev/ferry/transfer/agent"
)

func TestMayUseAgent(t *testing.T) {
	agents := agent.Bundle{"linux/amd64": {}}
	for _, tt := range []struct {
		name   string
		target transfer.Target
		want   bool
	}{
		{"agent", transfer.Target{Mode: transfer.ModeAgent}, true},
		{"auto with agents", transfer.Target{Mode: transfer.ModeAuto, Agents: agents}, true},
		{"auto without agents", transfer.Target{Mode: transfer.ModeAuto}, false},
		{"posix", transfer.Target{Mode: transfer.ModePOSIX, Agents: agents}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.target.MayUseAgent(); got != tt.want {
				t.Errorf("MayUseAgent() = %v, want %v", got, tt.want)
			}
		})
	}
}
