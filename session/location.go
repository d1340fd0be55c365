package session

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// DefaultLocation is where the store lives when the command line does not
// say: $FERRY_STORE if set (a directory, or later an s3:// URL), else
// $XDG_STATE_HOME/ferry, else ~/.local/state/ferry. A relative
// XDG_STATE_HOME is ignored, as the XDG spec says.
func DefaultLocation() (string, error) {
	if s := os.Getenv("FERRY_STORE"); s != "" {
		return s, nil
	}
	if x := os.Getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "ferry"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("session: default store location: %w", err)
	}
	if home == "" {
		return "", errors.New("session: default store location: no home directory")
	}
	return filepath.Join(home, ".local", "state", "ferry"), nil
}
