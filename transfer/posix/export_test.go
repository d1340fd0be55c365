package posix

// Scripts are the one-line scripts as sent, for syntax checks.
var Scripts = map[string]string{
	"stat":     statScript,
	"upload":   uploadScript,
	"download": downloadScript,
	"cleanup":  cleanupScript,
}
