package crowd

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
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

// TestGateInsideWithinSessions: a visitor counts itself inside from the answer that let it
// through until it sends its last request, within its admitted session, which the gate ends
// when that request's answer passes. The gate here has one slot and answers a /done only
// after it let the next visitor through (as an answer on its way back can be overtaken):
// counted until the answer arrived, two visitors were "inside" at once.
func TestGateInsideWithinSessions(t *testing.T) {
	const users = 6
	var mu sync.Mutex
	holder, admitted := "", 0
	next := make(chan struct{}, users) // one per admission
	var ids atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie("v")
		if err != nil {
			c = &http.Cookie{Name: "v", Value: fmt.Sprint(ids.Add(1))}
			http.SetCookie(w, c)
		}
		mu.Lock()
		switch {
		case r.URL.Path == "/done" && holder == c.Value:
			holder = ""
			last := admitted == users
			mu.Unlock()
			if !last {
				select { // the next visitor is let through before this answer arrives
				case <-next:
				case <-r.Context().Done():
				}
			}
			_, _ = w.Write([]byte("done"))
			return
		case holder == "" || holder == c.Value:
			if holder == "" {
				holder = c.Value
				admitted++
				if admitted > 1 {
					next <- struct{}{}
				}
			}
			mu.Unlock()
			_, _ = w.Write([]byte("ok"))
			return
		}
		mu.Unlock()
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"type":"waiting_room","number":%s}`, c.Value)
	}))
	defer srv.Close()
	rep, err := RunGate(context.Background(), GateConfig{Targets: []string{srv.URL}, Users: users, Requests: 2,
		ThinkTime: time.Millisecond, PollScale: 1, Deadline: time.Minute})
	require.NoError(t, err)
	require.Equal(t, users, rep.Done, "%s", rep)
	require.Equal(t, int64(1), rep.MaxInside, "one slot: one visitor inside at a time (%s)", rep)
}

// TestInsideShared: two processes' mappings of one inside file count together, so the most is
// the crowd's at one moment (two mappings in one process share their pages as two processes'
// do).
func TestInsideShared(t *testing.T) {
	path := t.TempDir() + "/inside"
	require.NoError(t, createInside(path))
	a, err := openInside(path)
	require.NoError(t, err)
	defer a.close()
	b, err := openInside(path)
	require.NoError(t, err)
	defer b.close()
	a.enter()
	b.enter()
	a.leave()
	b.enter()
	require.Equal(t, int64(2), a.now.Load())
	require.Equal(t, int64(2), b.most.Load(), "the most of both")
	_, err = openInside(t.TempDir() + "/none")
	require.Error(t, err)
}

// TestGateReportProblems: the gate mode fails a run whose visitors did not all get through, or
// lost or were passed over in their places, and its report names the 429s' likely cause.
func TestGateReportProblems(t *testing.T) {
	ok := GateReport{Users: 5, Admitted: 5, Done: 5}
	require.Empty(t, ok.Problems())
	require.NotContains(t, ok.String(), "map[")
	short := GateReport{Users: 100, Admitted: 7, Done: 7, Errors: map[string]int64{"429": 93}}
	require.Equal(t, []string{"93 of 100 visitors not done"}, short.Problems())
	require.Contains(t, short.String(), "errors 429 93")
	require.Contains(t, short.String(), "joins_per_client")
	require.Len(t, GateReport{Users: 1, Done: 1, FIFOViolations: 1, Renumbered: 2}.Problems(), 2)
}

// TestProcConns: --procs shares a cap of connections out, and no cap stays none (each process
// was capped at 1 connection a gate).
func TestProcConns(t *testing.T) {
	require.Equal(t, 0, procConns(0, 4))
	require.Equal(t, 25, procConns(100, 4))
	require.Equal(t, 1, procConns(2, 4))
}

// TestGateUserAddrs: with UserAddrs the visitors come from the prefix's addresses, every
// visitor done, each address's connections within MaxConnsPerTarget (in process, so that the
// race detector sees the visitors share their address's client).
func TestGateUserAddrs(t *testing.T) {
	var mu sync.Mutex
	conns := map[string]int{} // remote address -> connections open
	peak := 0
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		ip := c.RemoteAddr().(*net.TCPAddr).IP.String()
		mu.Lock()
		defer mu.Unlock()
		switch s {
		case http.StateNew:
			conns[ip]++
			peak = max(peak, conns[ip])
		case http.StateClosed, http.StateHijacked:
			conns[ip]--
		}
	}
	srv.Start()
	defer srv.Close()
	rep, err := RunGate(context.Background(), GateConfig{Targets: []string{srv.URL}, Users: 12, Requests: 3,
		ThinkTime: time.Millisecond, PollScale: 1, Deadline: time.Minute, MaxConnsPerTarget: 1,
		UserAddrs: netip.MustParsePrefix("127.0.4.0/30")})
	require.NoError(t, err)
	require.Equal(t, 12, rep.Done, "%s", rep)
	mu.Lock()
	defer mu.Unlock()
	require.ElementsMatch(t, []string{"127.0.4.0", "127.0.4.1", "127.0.4.2", "127.0.4.3"}, slices.Collect(maps.Keys(conns)))
	require.Equal(t, 1, peak, "one connection an address")
}
