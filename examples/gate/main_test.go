package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/waitroom/waitroom/gate"
	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

const (
	adminKey = "example-gate-admin-key-0123456789abcdef"
	tokenKey = "example-gate-token-key-0123456789abcdef"
)

// counter is what the shop saw: admitted visitors at once, and their first arrivals in order.
type counter struct {
	mu        sync.Mutex
	active    map[string]bool
	maxActive int
	seen      map[string]bool
	arrivals  []int64
	ended     map[string]bool
	problems  []string
}

func (c *counter) observe(a gate.Admission, done bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case a.TicketID == "" || a.Number < 1:
		c.problems = append(c.problems, fmt.Sprintf("a request without an admission: %+v", a))
	case c.ended[a.TicketID]:
		c.problems = append(c.problems, fmt.Sprintf("ticket %d came back after its session ended", a.Number))
	case done:
		delete(c.active, a.TicketID)
		c.ended[a.TicketID] = true
	default:
		if !c.seen[a.TicketID] {
			c.seen[a.TicketID] = true
			c.arrivals = append(c.arrivals, a.Number)
		}
		c.active[a.TicketID] = true
		c.maxActive = max(c.maxActive, len(c.active))
	}
}

// visitor is one person: an API client with a cookie jar.
type visitor struct {
	c           *http.Client
	ticket      string
	number      int64
	ticketToken string // the admission token it handed to the shop
}

type reply struct {
	code int
	body map[string]any
	hdr  http.Header
}

func (v *visitor) do(t *testing.T, method, url, auth string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := v.c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{code: resp.StatusCode, hdr: resp.Header}
	if strings.Contains(resp.Header.Get("Content-Type"), "json") {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, url, resp.StatusCode, raw, err)
		}
	}
	return r
}

// TestCrowdThroughMiddleware is the check of the gate, run against this example (the
// Go middleware in front of a shop) and a real waitroom instance: 2,000 visitors to /checkout
// with max_active 50. Each visitor first asks the shop (401 admission_required, JSON, with
// the waiting room's URL), joins the line by the API, and once admitted hands its admission
// token to the shop (?waitroom_token=, then the cookie). The first 50 hold their slots until
// everyone has joined; the others are let go in number order as the serving counter passes
// them. The shop counts at most (and exactly) 50 admitted visitors at once, first arrivals in
// ticket order, every session's end frees its slot (POST /checkout/done ends it at the waiting
// room), and a visitor whose session ended is sent back to the line by the online check.
func TestCrowdThroughMiddleware(t *testing.T) {
	const n, maxActive = 2000, 50
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := app.New(ctx, app.Config{DatabaseURL: sqltest.SQLite(t), AdminKey: adminKey, TokenKey: tokenKey, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	room := httptest.NewServer(a.Handler())
	t.Cleanup(func() {
		_ = a.Hub.Stop(context.Background())
		room.Close()
		if err := a.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if _, _, err := a.Registry.Put(ctx, event.Event{ID: "shop", Name: "Shop", MaxActive: maxActive,
		SessionTTL: event.DefaultSessionTTL, ClaimTTL: event.DefaultClaimTTL,
		Limits: event.Limits{JoinsPerClient: event.MaxLimit}}, 0); err != nil { // the crowd shares one address
		t.Fatal(err)
	}

	g, err := gate.New(gate.Config{WaitingRoomURL: room.URL, EventID: "shop", OnlineCheck: true,
		OnlineCacheTTL: -1, Logger: quiet, Paths: []string{"/checkout"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	cnt := &counter{active: map[string]bool{}, seen: map[string]bool{}, ended: map[string]bool{}}
	shop := httptest.NewServer(newShop(g, room.URL, "shop", cnt.observe))
	t.Cleanup(shop.Close)

	tr := &http.Transport{MaxConnsPerHost: 128, MaxIdleConnsPerHost: 128}
	t.Cleanup(tr.CloseIdleConnections)
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	// enter hands the admission token to the shop and makes the first admitted request.
	enter := func(v *visitor, token string) {
		r := v.do(t, "GET", shop.URL+"/checkout?waitroom_token="+token, "")
		if r.code != http.StatusSeeOther {
			t.Fatalf("visitor %d: the hand-off answered %d", v.number, r.code)
		}
		r = v.do(t, "GET", shop.URL+"/checkout", "")
		if r.code != 200 || r.body["number"] != float64(v.number) {
			t.Fatalf("visitor %d: /checkout with the cookie answered %d %v", v.number, r.code, r.body)
		}
	}
	var sessions sync.WaitGroup
	session := func(v *visitor, revisit bool) {
		defer sessions.Done()
		if r := v.do(t, "GET", shop.URL+"/checkout", ""); r.code != 200 {
			t.Errorf("visitor %d: a second /checkout answered %d", v.number, r.code)
		}
		if r := v.do(t, "POST", shop.URL+"/checkout/done", ""); r.code != 200 {
			t.Errorf("visitor %d: /checkout/done answered %d", v.number, r.code)
			return
		}
		if !revisit {
			return
		}
		// The session ended: the old token no longer passes (online check), so the visitor is
		// sent back to the line, JSON for an API client.
		r := v.do(t, "GET", shop.URL+"/checkout", v.ticketToken)
		if r.code != http.StatusUnauthorized || r.body["code"] != "admission_required" {
			t.Errorf("visitor %d after its session ended: %d %v, want 401 admission_required", v.number, r.code, r.body)
		}
	}

	vs := make([]*visitor, n)
	byNumber := map[int64]*visitor{}
	start := time.Now()
	held := make(chan struct{})
	for i := range vs {
		jar, _ := cookiejar.New(nil)
		v := &visitor{c: &http.Client{Transport: tr, Jar: jar, CheckRedirect: noRedirect}}
		vs[i] = v
		if i%10 == 0 {
			if r := v.do(t, "GET", shop.URL+"/", ""); r.code != 200 {
				t.Fatalf("the public home page answered %d", r.code)
			}
			// Without an admission, the shop answers JSON with where to wait.
			r := v.do(t, "GET", shop.URL+"/checkout", "")
			if r.code != http.StatusUnauthorized || r.body["code"] != "admission_required" || r.body["waiting_room_url"] == nil {
				t.Fatalf("visitor %d without an admission: %d %v", i, r.code, r.body)
			}
		}
		r := v.do(t, "POST", room.URL+"/v1/events/shop/tickets", "")
		if r.code != http.StatusCreated {
			t.Fatalf("visitor %d: join answered %d %v", i, r.code, r.body)
		}
		v.ticket, _ = r.body["ticket_id"].(string)
		num, _ := r.body["number"].(float64)
		v.number = int64(num)
		if v.number != int64(i+1) {
			t.Fatalf("visitor %d got number %d", i, v.number)
		}
		byNumber[v.number] = v
		admitted := r.body["status"] == "ADMITTED"
		if admitted != (i < maxActive) {
			t.Fatalf("visitor %d (number %d): %v; want the first %d admitted at join", i, v.number, r.body["status"], maxActive)
		}
		if admitted {
			tok, _ := r.body["admission_token"].(string)
			v.ticketToken = tok
			enter(v, tok)
			sessions.Add(1)
			go func() { <-held; session(v, v.number <= 5) }()
		}
	}
	joined := time.Since(start)
	close(held)

	// Let the queued visitors in, in number order, as the serving counter passes them.
	deadline := time.Now().Add(2 * time.Minute)
	next := int64(maxActive + 1)
	for next <= int64(n) {
		st, err := a.Backend.Line.Stats(ctx, "shop")
		if err != nil {
			t.Fatal(err)
		}
		if st.Serving < next {
			if time.Now().After(deadline) {
				t.Fatalf("the line stalled at serving %d (next visitor %d)", st.Serving, next)
			}
			time.Sleep(5 * time.Millisecond) // polling the counter with a deadline
			continue
		}
		for ; next <= st.Serving && next <= int64(n); next++ {
			v := byNumber[next]
			r := v.do(t, "GET", room.URL+"/v1/events/shop/tickets/"+v.ticket, "")
			tok, _ := r.body["admission_token"].(string)
			if r.code != 200 || r.body["status"] != "ADMITTED" || tok == "" {
				t.Fatalf("visitor %d (serving %d): status %d %v", next, st.Serving, r.code, r.body)
			}
			v.ticketToken = tok
			enter(v, tok)
			sessions.Add(1)
			go session(v, false)
		}
	}
	sessions.Wait()
	t.Logf("%d visitors: joined in %s, all through in %s", n, joined.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	cnt.mu.Lock()
	defer cnt.mu.Unlock()
	if len(cnt.problems) > 0 {
		t.Fatalf("the shop saw: %v", cnt.problems[:min(len(cnt.problems), 20)])
	}
	if cnt.maxActive != maxActive {
		t.Fatalf("the shop saw at most %d admitted visitors at once, want exactly max_active %d", cnt.maxActive, maxActive)
	}
	if len(cnt.arrivals) != n {
		t.Fatalf("%d distinct visitors reached the shop, want %d", len(cnt.arrivals), n)
	}
	for i, num := range cnt.arrivals {
		if num != int64(i+1) {
			t.Fatalf("arrival %d at the shop was ticket %d: not FIFO", i, num)
		}
	}
}
