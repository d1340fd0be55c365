package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/ferry-dev/ferry/relay"
)

// localTerminal is what `ferry exec -t` does to the terminal it runs on,
// as `docker exec -it` does: stdin, when it is a terminal, goes raw, so
// that every key (^C and ^D included) reaches the remote terminal, which
// does the echoing and line editing; the remote terminal takes the local
// one's size, and every SIGWINCH's.
type localTerminal struct {
	size    relay.WindowSize
	resize  chan relay.WindowSize
	restore func()
}

// terminalFd is the descriptor of f when f is a terminal.
func terminalFd(v any) (int, bool) {
	f, ok := v.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0, false
	}
	return int(f.Fd()), true
}

// startTerminal sets the local terminal up for a remote one, with in and
// out as ferry's stdin and stdout. Its stop must be called on every way
// out: it puts the terminal back as it was and ends the SIGWINCH watch.
// Neither a stdin nor a stdout that is a terminal leaves all as it is.
func startTerminal(ctx context.Context, in io.Reader, out io.Writer) (*localTerminal, func(), error) {
	lt := &localTerminal{restore: func() {}}
	inFd, inTTY := terminalFd(in)
	sizeFd, sizeOK := inFd, inTTY
	if !sizeOK {
		sizeFd, sizeOK = terminalFd(out)
	}
	if !sizeOK {
		return lt, func() {}, nil
	}
	getSize := func() (relay.WindowSize, bool) {
		w, h, err := term.GetSize(sizeFd)
		if err != nil || w <= 0 || h <= 0 {
			return relay.WindowSize{}, false
		}
		return relay.WindowSize{Cols: uint16(min(w, 0xffff)), Rows: uint16(min(h, 0xffff))}, true
	}
	lt.size, _ = getSize()
	if inTTY {
		old, err := term.MakeRaw(inFd)
		if err != nil {
			return nil, nil, err
		}
		lt.restore = func() { _ = term.Restore(inFd, old) }
	}
	lt.resize = make(chan relay.WindowSize)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-winch:
			case <-quit:
				return
			case <-ctx.Done():
				return
			}
			ws, ok := getSize()
			if !ok {
				continue
			}
			select {
			case lt.resize <- ws:
			case <-quit:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	stop := func() {
		signal.Stop(winch)
		close(quit)
		<-done
		lt.restore()
	}
	return lt, stop, nil
}
