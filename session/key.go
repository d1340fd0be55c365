package session

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxKeyBase bounds the readable part of a task key, as Rascal does.
const maxKeyBase = 45

// TaskKey is Rascal's TaskSessionKey(repo, taskID), exactly (rascal.md,
// "Session directories"): the readable slug of repo and task, cut to 45
// bytes, then "-" and the first 10 hex digits of sha256(repo + "::" +
// task), both inputs trimmed of spaces. Keys must match Rascal's so that a
// session saved through ferry is the one Rascal would resume.
func TaskKey(repo, taskID string) string {
	repo, taskID = strings.TrimSpace(repo), strings.TrimSpace(taskID)
	sum := sha256.Sum256([]byte(repo + "::" + taskID))
	base := slug(strings.ToLower(repo + "-" + taskID))
	if len(base) > maxKeyBase {
		base = strings.Trim(base[:maxKeyBase], "-")
	}
	if base == "" {
		base = "task"
	}
	return base + "-" + hex.EncodeToString(sum[:])[:10]
}

// slug replaces every run of characters outside a-z and 0-9 by one "-",
// and trims "-" from both ends.
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range s {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.Trim(b.String(), "-")
}
