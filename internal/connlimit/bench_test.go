package connlimit

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/waitroom/waitroom/internal/httpjson"
)

// BenchmarkKeepAliveRequest: keep-alive GETs through a Limiter's listener to an http.Server
// whose handler does what the app's first handlers do (Serving, DeferBackgroundRead), with
// and without Config.ServerAnswer; the client is in the same process. cpu-ns/op is the
// process's CPU (user and system) per request, steadier than ns/op on a machine shared with
// other work:
//
//	go test -run '^$' -bench KeepAlive -count 6 ./internal/connlimit/
func BenchmarkKeepAliveRequest(b *testing.B) {
	for _, bc := range []struct {
		name   string
		answer func(string, []byte) ([]byte, bool)
	}{{"plain", nil}, {"answers", func(_ string, p []byte) ([]byte, bool) {
		q, _, ok := httpjson.FramingAnswer(p)
		return q, ok
	}}} {
		b.Run(bc.name, func(b *testing.B) { benchKeepAlive(b, Config{ServerAnswer: bc.answer}) })
	}
}

func benchKeepAlive(b *testing.B, cfg Config) {
	lim, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{ConnState: lim.ConnState, ConnContext: ConnContext, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			Serving(r.Context())
			if bg := DeferBackgroundRead(r.Context()); bg != nil {
				defer bg.EndDeferredRead()
			}
			_, _ = io.WriteString(w, `{"ok":true}`)
		})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lim.Listen(inner, "bench")) }()
	defer func() { _ = srv.Close(); <-done }()
	req := []byte("GET / HTTP/1.1\r\nHost: bench\r\n\r\n")
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for pb.Next() {
			if _, err := c.Write(req); err != nil {
				b.Error(err)
				return
			}
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
		}
	})
	b.StopTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}
