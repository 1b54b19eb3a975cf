package gate_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/waitroom/waitroom/gate"
	"github.com/waitroom/waitroom/internal/servetest"
)

// TestEndToEnd runs the real binary: it builds cmd/waitroom, starts `waitroom serve` on the
// embedded line, creates an event, joins it, and checks that the gate lets the admission token
// through, then that the online check sends the visitor back once the ticket left.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the waitroom binary")
	}
	const adminKey = "gate-e2e-admin-key-0123456789abcdef"
	base := startWaitroom(t, adminKey, "gate-e2e-token-key-0123456789abcdef")

	// The event: one admitted session at a time.
	call(t, "PUT", base+"/v1/events/shop", adminKey, `{"name":"Shop","max_active":1}`, http.StatusCreated, nil)
	var ticket struct {
		TicketID       string `json:"ticket_id"`
		Status         string `json:"status"`
		Number         int64  `json:"number"`
		AdmissionToken string `json:"admission_token"`
	}
	call(t, "POST", base+"/v1/events/shop/tickets", "", "", http.StatusCreated, &ticket)
	if ticket.Status != "ADMITTED" || ticket.AdmissionToken == "" {
		t.Fatalf("join: %+v, want ADMITTED with an admission token", ticket)
	}

	clock := newFakeClock(time.Now())
	newServedGate := func(online bool) *httptest.Server {
		g, err := gate.New(gate.Config{
			WaitingRoomURL: base, EventID: "shop", OnlineCheck: online, Clock: clock,
			Logger: slog.New(slog.NewTextHandler(tWriter{t}, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Close)
		srv := httptest.NewServer(g.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			a, _ := gate.FromContext(r.Context())
			fmt.Fprintf(w, "checkout for ticket %d %s of %s", a.Number, a.TicketID, a.Event)
		})))
		t.Cleanup(srv.Close)
		return srv
	}
	shop := newServedGate(true)
	offline := newServedGate(false)
	want := fmt.Sprintf("checkout for ticket %d %s of shop", ticket.Number, ticket.TicketID)

	// The hand-off from the waiting-room page: cookie and redirect without the parameter.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(noFollow.CloseIdleConnections)
	resp := get(t, noFollow, shop.URL+"/checkout?waitroom_token="+ticket.AdmissionToken, "text/html", nil)
	if resp.status != http.StatusSeeOther || resp.header.Get("Location") != "/checkout" {
		t.Fatalf("hand-off: %d Location %q, want 303 /checkout", resp.status, resp.header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, c := range resp.cookies {
		if c.Name == "waitroom_admission_shop" {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.Value != ticket.AdmissionToken {
		t.Fatalf("hand-off cookies %v", resp.cookies)
	}
	cookieAuth := withCookie(cookie)
	if resp := get(t, noFollow, shop.URL+"/checkout", "text/html", cookieAuth); resp.status != 200 || resp.body != want {
		t.Fatalf("with the cookie: %d %q, want 200 %q", resp.status, resp.body, want)
	}
	bearer := withBearer(ticket.AdmissionToken)
	if resp := get(t, noFollow, shop.URL+"/api/checkout", "application/json", bearer); resp.status != 200 || resp.body != want {
		t.Fatalf("with the bearer token: %d %q, want 200 %q", resp.status, resp.body, want)
	}

	// The visitor leaves: the session ends at once.
	call(t, "DELETE", base+"/v1/events/shop/tickets/"+ticket.TicketID, "", "", http.StatusNoContent, nil)
	clock.Advance(gate.DefaultOnlineCacheTTL + time.Second) // past the cached "live"

	resp = get(t, noFollow, shop.URL+"/checkout", "text/html", cookieAuth)
	if resp.status != http.StatusSeeOther || resp.header.Get("Location") != base+"/e/shop?return_url="+url.QueryEscape(shop.URL+"/checkout") {
		t.Fatalf("after leaving: %d Location %q, want 303 %s/e/shop", resp.status, resp.header.Get("Location"), base)
	}
	resp = get(t, noFollow, shop.URL+"/api/checkout", "application/json", bearer)
	var p map[string]any
	if err := json.Unmarshal([]byte(resp.body), &p); err != nil || resp.status != 401 || p["code"] != "admission_required" || p["waiting_room_url"] != base+"/e/shop" {
		t.Fatalf("after leaving, API: %d %s", resp.status, resp.body)
	}
	// Offline verification alone still accepts the token until its exp: that is what the
	// online check is for.
	if resp := get(t, noFollow, offline.URL+"/checkout", "text/html", cookieAuth); resp.status != 200 {
		t.Fatalf("offline gate after leaving: %d, want 200 (the token has not expired)", resp.status)
	}
}

// startWaitroom builds cmd/waitroom into a temporary directory, runs `waitroom serve` on a free
// loopback port with the embedded line and a fresh SQLite file, waits for /readyz, and
// returns its base URL. The process gets SIGINT at cleanup.
func startWaitroom(t *testing.T, adminKey, tokenKey string) string {
	t.Helper()
	// Runs last: keep-alive connections to the process (this test's calls, the gates' fetches).
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections)
	dir := t.TempDir()
	bin := filepath.Join(dir, "waitroom")
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	build := exec.Command(goBin, "build", "-o", bin, "./cmd/waitroom")
	build.Dir = ".." // the module root: this test runs in gate/
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/waitroom: %v\n%s", err, out)
	}

	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "waitroom.db"))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WAITROOM_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "WAITROOM_ADMIN_KEY="+adminKey, "WAITROOM_TOKEN_KEY="+tokenKey)
	base := servetest.Start(t, cmd, 60*time.Second)

	// Ready once the store and the database answer.
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/readyz not 200 within 30 s (last error %v)", base, err)
		}
		<-tick.C
	}
}

// call makes a request to the waiting room and decodes the JSON answer into out (if not nil),
// failing the test unless the status is want.
func call(t *testing.T, method, url, bearer, body string, want int, out any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, url, resp.StatusCode, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, url, err, b)
		}
	}
}

type answer struct {
	status  int
	header  http.Header
	cookies []*http.Cookie
	body    string
}

func withCookie(c *http.Cookie) func(*http.Request) {
	return func(r *http.Request) { r.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value}) }
}

func withBearer(tok string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
}

// get sends GET url with Accept and the credential auth adds (if not nil).
func get(t *testing.T, c *http.Client, url, accept string, auth func(*http.Request)) answer {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", accept)
	if auth != nil {
		auth(req)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, cookies: resp.Cookies(), body: string(b)}
}
