package crowd

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGateConnectionsCapped: with MaxConnsPerTarget the visitors share at most that many
// connections to a gate, however many wait at once. Without it 40 visitors polling together
// opened 40; thousands from one address went past a gate's max_conns_per_client and had their
// connections shed (the auto experiment's transport errors at C = 1,000).
func TestGateConnectionsCapped(t *testing.T) {
	var open, peak atomic.Int64
	var mu sync.Mutex
	polls := map[string]int{} // per visitor (cookie)
	var next atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * time.Millisecond) // a gate's service time, so that requests overlap
		c, err := r.Cookie("v")
		if err != nil {
			c = &http.Cookie{Name: "v", Value: fmt.Sprint(next.Add(1))}
			http.SetCookie(w, c)
		}
		mu.Lock()
		polls[c.Value]++
		n := polls[c.Value]
		mu.Unlock()
		if r.URL.Path == "/shop" && n <= 2 { // waits twice, then is let through
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, `{"type":"waiting_room","number":%s}`, c.Value)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			n := open.Add(1)
			for {
				m := peak.Load()
				if n <= m || peak.CompareAndSwap(m, n) {
					break
				}
			}
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	srv.Start()
	defer srv.Close()
	rep, err := RunGate(context.Background(), GateConfig{Targets: []string{srv.URL}, Users: 40, Requests: 3,
		ThinkTime: time.Millisecond, PollScale: 1, Deadline: time.Minute, MaxConnsPerTarget: 4})
	require.NoError(t, err)
	require.Equal(t, 40, rep.Done, "every visitor made its requests: %s", rep)
	require.Zero(t, rep.Renumbered)
	require.LessOrEqual(t, peak.Load(), int64(4), "at most MaxConnsPerTarget connections to the gate")
}

// TestGateReportAdd: the reports of a crowd's processes add up, MaxInside to an upper bound
// (each process's most, summed) and the errors by status.
func TestGateReportAdd(t *testing.T) {
	r := GateReport{Users: 3, Admitted: 2, Done: 1, OriginRequests: 20, OriginErrors: 1, FIFOViolations: 0, Renumbered: 1,
		MaxInside: 2, Errors: map[string]int64{"503": 1}}
	r.Add(GateReport{Users: 4, Admitted: 4, Done: 4, OriginRequests: 40, OriginErrors: 2, FIFOViolations: 1,
		MaxInside: 3, Errors: map[string]int64{"503": 2, "transport": 1}})
	require.Equal(t, GateReport{Users: 7, Admitted: 6, Done: 5, OriginRequests: 60, OriginErrors: 3, FIFOViolations: 1, Renumbered: 1,
		MaxInside: 5, Errors: map[string]int64{"503": 3, "transport": 1}}, r)
	var empty GateReport
	empty.Add(GateReport{Users: 1, Errors: map[string]int64{"429": 1}})
	require.Equal(t, map[string]int64{"429": 1}, empty.Errors)
}
