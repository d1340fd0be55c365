// Package local implements relay.Execer with processes on this machine. It
// serves tests and the demo, and is the process runner inside the embedded
// gateway (relay/gateway), which is why it can run commands the way an
// OpenShell gateway does: through a login shell, with a cleared environment.
package local
