package gate

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestSwitchingProtocolsIsTheAnswer: a WebSocket accepted as coder/websocket accepts one
// (WriteHeader(101), then a hijack) is measured at its 101, not at the end of the socket's
// life: 101 is a final status, unlike 103 Early Hints (helper-79: a socket held 1.5 s read as a
// p95 of 1,637 ms). The observation is made while the socket is still open.
func TestSwitchingProtocolsIsTheAnswer(t *testing.T) {
	g := &Gate{health: &health{buckets: make([]int64, len(healthBounds)+1)}}
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
		}))
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
