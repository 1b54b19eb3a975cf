package gate

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/waitroom/waitroom/internal/clientaddr"
)

// TestSwitchingProtocolsIsTheAnswer: a WebSocket accepted as coder/websocket accepts one
// (WriteHeader(101), then a hijack) is measured at its 101, not at the end of the socket's
// life: 101 is a final status, unlike 103 Early Hints (helper-79: a socket held 1.5 s read as a
// p95 of 1,637 ms). The observation is made while the socket is still open.
func TestSwitchingProtocolsIsTheAnswer(t *testing.T) {
	g := &Gate{health: &health{}, cfg: Config{ClientAddr: clientaddr.Peer}}
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.pass(w, r, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Upgrade", "websocket")
			w.Header().Set("Connection", "Upgrade")
			w.WriteHeader(http.StatusSwitchingProtocols)
			c, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			<-release // the socket's life
		}), 1)
	}))
	defer srv.Close()
	defer close(release)
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.Contains(line, " 101 ") {
		t.Fatalf("answer %q, %v", line, err)
	}
	// WriteHeader(101) observed before net/http wrote the status line the client just read.
	if n, errs, _ := g.health.take(); n != 1 || errs != 0 {
		t.Fatalf("observed %d requests (%d errors) while the socket is open, want the one upgrade", n, errs)
	}
}

// TestReportBoundsEachSession: the middleware's report bounds each session's share as the
// waiting room's own gate does (internal/originhealth): one admitted visitor's own 5xx and slow
// answers are not the site's health; errors two visitors see are.
func TestReportBoundsEachSession(t *testing.T) {
	h := &health{}
	for s := range int64(25) {
		h.observe(s+1, cl(s+1), 20*time.Millisecond, false)
		h.observe(s+1, cl(s+1), 30*time.Millisecond, false)
	}
	for range 20 {
		h.observe(99, cl(99), 5*time.Second, true)
	}
	n, errs, p95 := h.take()
	if n != 50+4 || errs != 0 || p95 > 40 {
		t.Fatalf("report %d requests, %d errors, p95 %.1f ms: want 54 (its requests up to twice a session's 2), 0 and about 30 ms", n, errs, p95)
	}
	h.observe(1, cl(1), 10*time.Millisecond, true)
	h.observe(2, cl(2), 10*time.Millisecond, true)
	if n, errs, _ := h.take(); n != 2 || errs != 2 {
		t.Fatalf("report %d requests, %d errors: want 2 and 2", n, errs)
	}
}

// cl is session i's client: an address of its own.
func cl(i int64) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)
}
