package wire

// Exit codes the supervisor reports for its command.
const (
	// ExitTimeout is a command ended by its timeout, as timeout(1) says.
	ExitTimeout = 124
	// ExitCannotRun is a command that could not be started, as a shell
	// says for a program it cannot find.
	ExitCannotRun = 127
)
