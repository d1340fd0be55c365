// Package fdfile is a regular file as a bare descriptor, for the code
// that opens many small files: the archive writer and extractor, and the
// agent's scans.
//
// os.Open offers every file to the runtime's poller (on Linux four
// fcntl(2) and a failing epoll_ctl(2) per regular file), and an *os.File
// costs a finalizer and the poller's bookkeeping on close: together as
// much again as the open, the copy and the close themselves, which on many
// small files is most of the time. A regular file is never pollable, so
// plain blocking syscalls are what os.File would end up making for it
// anyway. A File has no finalizer: whoever opens one closes it.
package fdfile
