package originsim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/waitroom/waitroom/internal/cmdflag"
)

const usageHeader = `waitroom origin: a simulated site of a given capacity for tests and demos of admission mode
auto (docs/autoadmit.md): servers x (1 / service time) requests/s, latency growing near it and
503s past it. POST /_sim/servers?n=N changes the servers while it runs; GET /_sim/stats reads
its counts; /done answers "Waitroom-Command: complete".

Usage: waitroom origin [flags]
`

// Command runs `waitroom origin` until ctx ends.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg Config
	addr := ""
	fs := cmdflag.New("origin", usageHeader)
	fs.StringVar(&addr, "addr", "127.0.0.1:9000", "listen `address`")
	fs.IntVar(&cfg.Servers, "servers", 20, "requests served at once")
	fs.DurationVar(&cfg.Service, "service", 100*time.Millisecond, "mean service time of a request")
	fs.Float64Var(&cfg.Jitter, "jitter", 0.3, "sigma of the log-normal service time (0: constant)")
	fs.IntVar(&cfg.Queue, "queue", 0, "most requests waiting for a server, more get 503 (0: 4 x servers, at least 16)")
	fs.DurationVar(&cfg.MaxWait, "max-wait", 2*time.Second, "longest wait for a server before a 503")
	if err := fs.Parse(args, stdout); err != nil {
		return err
	}
	if cfg.Servers < 1 || cfg.Service <= 0 || cfg.Jitter < 0 {
		return cmdflag.Usagef("--servers must be at least 1, --service positive, --jitter at least 0")
	}
	o := New(cfg)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: o, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "origin on http://%s: %d servers of %v, capacity %.0f requests/s\n", ln.Addr(), cfg.Servers, cfg.Service, o.Capacity(cfg.Servers))
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
