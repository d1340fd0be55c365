//go:build !unix

package session

const oNoFollow = 0
