package transfer

import "fmt"

// Mode is how files move: through ferry's agent, or through the sandbox's
// own sh and tar.
type Mode int

const (
	// ModeAuto uses the agent where it can run and POSIX mode elsewhere.
	ModeAuto Mode = iota
	// ModeAgent uses the agent and fails, saying why, where it cannot run.
	ModeAgent
	// ModePOSIX uses the sandbox's sh, tar and cat.
	ModePOSIX
)

// ParseMode parses the --mode values "auto", "agent" and "posix".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "auto":
		return ModeAuto, nil
	case "agent":
		return ModeAgent, nil
	case "posix":
		return ModePOSIX, nil
	}
	return 0, fmt.Errorf("parse mode %q: want auto, agent or posix", s)
}

func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeAgent:
		return "agent"
	case ModePOSIX:
		return "posix"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}
