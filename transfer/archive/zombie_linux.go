package archive

import (
	"bytes"
	"os"
	"strconv"
)

// zombie reports whether process pid has exited and waits to be reaped,
// as /proc says (the state after the command's closing parenthesis).
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] == 'Z' || b[i+2] == 'X'
}
