// Package rpctrace logs every gRPC call's start and duration to stderr
// when FERRY_TRACE_RPC is set: a diagnostic of the round trips a command
// waits for.
package rpctrace

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
)

var (
	on    = os.Getenv("FERRY_TRACE_RPC") != ""
	start = time.Now()
	seq   atomic.Int64
)

func since() float64 { return float64(time.Since(start).Microseconds()) / 1000 }

// Options are the dial options that trace a connection named name.
func Options(name string) []grpc.DialOption {
	if !on {
		return nil
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			n, t := seq.Add(1), time.Now()
			fmt.Fprintf(os.Stderr, "rpc %4d %9.1fms %s unary %s\n", n, since(), name, method)
			err := invoker(ctx, method, req, reply, cc, opts...)
			fmt.Fprintf(os.Stderr, "rpc %4d %9.1fms %s done %s in %.1fms err=%v\n", n, since(), name, method, float64(time.Since(t).Microseconds())/1000, err)
			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			n, t := seq.Add(1), time.Now()
			fmt.Fprintf(os.Stderr, "rpc %4d %9.1fms %s stream %s\n", n, since(), name, method)
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return s, err
			}
			return &traced{ClientStream: s, n: n, t: t, name: name, method: method}, nil
		}),
	}
}

type traced struct {
	grpc.ClientStream
	n             int64
	t             time.Time
	name, method  string
	first, closed bool
}

func (s *traced) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if !s.first {
		s.first = true
		fmt.Fprintf(os.Stderr, "rpc %4d %9.1fms %s first %s after %.1fms\n", s.n, since(), s.name, s.method, float64(time.Since(s.t).Microseconds())/1000)
	}
	if err != nil && !s.closed {
		s.closed = true
		fmt.Fprintf(os.Stderr, "rpc %4d %9.1fms %s end %s after %.1fms\n", s.n, since(), s.name, s.method, float64(time.Since(s.t).Microseconds())/1000)
	}
	return err
}
