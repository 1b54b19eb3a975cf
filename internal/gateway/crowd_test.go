package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// testEvent is the event of the crowd tests; the gate protects /checkout and /api/cart with it.
const testEvent = "spring-sale"

// shop is the origin behind the gate in the crowd tests. It counts, as the gate's headers tell
// it, the distinct admitted visitors between their first request and the one it answers with
// "Waitroom-Command: complete" (/checkout/done), the order of first arrivals, and what it
// should never see: a protected request without the gate's headers or with a client's forged
// ones, a visitor whose number the line has not reached yet, and X-Waitroom-* headers on a
// bypassed path.
type shop struct {
	srv     *httptest.Server
	serving func() int64 // the line's serving counter (set before traffic)
	// complete, when set, ends a session the way an origin behind forward auth does (the
	// line's DELETE, and the cookie cleared) instead of answering "Waitroom-Command: complete".
	complete func(ticket string) error

	mu        sync.Mutex
	active    map[string]bool
	maxActive int
	seen      map[string]bool
	arrivals  []int64 // ticket numbers in order of first arrival
	problems  []string
}

func newShop(t *testing.T) *shop {
	s := &shop{active: map[string]bool{}, seen: map[string]bool{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *shop) problem(format string, a ...any) {
	s.mu.Lock()
	if len(s.problems) < 20 {
		s.problems = append(s.problems, fmt.Sprintf(format, a...))
	}
	s.mu.Unlock()
}

func (s *shop) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/echo" { // what reached the shop (TestNginx's spoofed headers)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"uri": r.RequestURI, "header": r.Header})
		return
	}
	ticket := r.Header.Get("X-Waitroom-Ticket")
	if !strings.HasPrefix(r.URL.Path, "/checkout") && !strings.HasPrefix(r.URL.Path, "/api/cart") {
		for k := range r.Header {
			if strings.HasPrefix(k, "X-Waitroom-") {
				s.problem("bypassed %s arrived with %s", r.URL.Path, k)
			}
		}
		_, _ = io.WriteString(w, "ok "+r.URL.Path)
		return
	}
	n, err := strconv.ParseInt(r.Header.Get("X-Waitroom-Number"), 10, 64)
	if ticket == "" || ticket == "forged" || err != nil || r.Header.Get("X-Waitroom-Event") != testEvent ||
		r.Header.Get("X-Waitroom-Admitted-Until") == "" {
		s.problem("protected %s arrived with ticket %q number %q event %q", r.URL.Path, ticket,
			r.Header.Get("X-Waitroom-Number"), r.Header.Get("X-Waitroom-Event"))
		http.Error(w, "no admission", 400)
		return
	}
	s.mu.Lock()
	if !s.seen[ticket] {
		s.seen[ticket] = true
		s.arrivals = append(s.arrivals, n)
		if sv := s.serving(); n > sv {
			s.problems = append(s.problems, fmt.Sprintf("ticket %d arrived with the line serving %d", n, sv))
		}
	}
	if r.URL.Path == "/checkout/done" {
		delete(s.active, ticket)
		if s.complete == nil {
			w.Header().Set("Waitroom-Command", "complete")
		}
	} else {
		s.active[ticket] = true
		s.maxActive = max(s.maxActive, len(s.active))
	}
	s.mu.Unlock()
	if r.URL.Path == "/checkout/done" && s.complete != nil {
		if err := s.complete(ticket); err != nil {
			s.problem("ending the session of %d: %v", n, err)
		}
		http.SetCookie(w, &http.Cookie{Name: "waitroom_" + testEvent, Path: "/", MaxAge: -1})
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"number":%d,"ticket":%q}`, n, ticket)
}

// front is where the crowd's visitors go: the gate itself, or nginx in front of the shop and
// a waitroom serve.
type front struct {
	base    string
	serving func() int64
}

// visitor is one person with a browser-like cookie jar.
type visitor struct {
	c      *http.Client
	number int64  // the first ticket's number
	ticket string // the first ticket's id
}

// answer is what a visitor got for a protected request.
type answer struct {
	code    int
	number  int64  // admitted: the number the origin saw; waiting: the place's
	ticket  string // waiting: the ticket id
	retry   string // Retry-After
	ctype   string
	command string // a Waitroom-Command that leaked through
	cookies []*http.Cookie
}

func (v *visitor) do(t *testing.T, base, method, path string) answer {
	req, err := http.NewRequest(method, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-Waitroom-Ticket", "forged") // a client's own: the gate must replace it
	resp, err := v.c.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return answer{}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	a := answer{code: resp.StatusCode, retry: resp.Header.Get("Retry-After"), ctype: resp.Header.Get("Content-Type"),
		command: resp.Header.Get("Waitroom-Command"), cookies: resp.Cookies()}
	var m struct {
		Number   int64  `json:"number"`
		Ticket   string `json:"ticket"`
		TicketID string `json:"ticket_id"`
	}
	if strings.Contains(a.ctype, "json") {
		if err := json.Unmarshal(body, &m); err != nil {
			t.Errorf("%s %s: %d %s: %v", method, path, resp.StatusCode, body, err)
		}
	}
	a.number, a.ticket = m.Number, m.TicketID
	return a
}

// runCrowd sends n visitors to /checkout of an event with max_active maxActive through f and
// checks what the issue asks: the shop never sees more than maxActive distinct admitted
// visitors at once (and does see that many: the limit is reached), they arrive in FIFO order,
// bypassed paths always pass, API clients get JSON, and a visitor whose session ended goes back
// to the line.
//
// Visitors join one after the other (so that ticket numbers follow visitor order), the first
// maxActive are admitted at join and hold their slots until everyone has joined; then each
// admitted visitor makes a second request and ends with /checkout/done, whose answer carries
// "Waitroom-Command: complete". The queued ones are let go in number order as the line's
// serving counter passes them (each one's first request waits for the previous one's), so any
// visitor the gate refused, or let in early, breaks the order or the count.
func runCrowd(t *testing.T, f front, s *shop, n, maxActive int, timeout time.Duration) {
	tr := &http.Transport{MaxConnsPerHost: 128, MaxIdleConnsPerHost: 128}
	t.Cleanup(tr.CloseIdleConnections)
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	vs := make([]*visitor, n)
	byNumber := map[int64]*visitor{}
	var sessions sync.WaitGroup
	session := func(v *visitor, revisit bool) {
		defer sessions.Done()
		if a := v.do(t, f.base, "GET", "/api/cart"); a.code != 200 {
			t.Errorf("visitor %d: /api/cart answered %d for an admitted visitor", v.number, a.code)
		}
		a := v.do(t, f.base, "POST", "/checkout/done")
		if a.code != 200 || a.command != "" {
			t.Errorf("visitor %d: /checkout/done answered %d, Waitroom-Command %q leaked", v.number, a.code, a.command)
		}
		if !revisit {
			return
		}
		// The session ended: the next request goes back to the line, with a new place.
		a = v.do(t, f.base, "GET", "/checkout")
		if a.code != 503 || a.number <= int64(n) || a.ticket == "" || a.ticket == v.ticket {
			t.Errorf("visitor %d after its session ended: %d, number %d (want 503 and a number > %d)", v.number, a.code, a.number, n)
			return
		}
		req, _ := http.NewRequest("DELETE", f.base+"/v1/events/"+testEvent+"/tickets/"+a.ticket, nil)
		resp, err := v.c.Do(req)
		if err != nil || resp.StatusCode != 204 {
			t.Errorf("leaving the line again: %v %v", err, resp)
		} else {
			resp.Body.Close()
		}
	}

	start := time.Now()
	held := make(chan struct{})
	for i := range vs {
		jar, _ := cookiejar.New(nil)
		v := &visitor{c: &http.Client{Transport: tr, Jar: jar, CheckRedirect: noRedirect}}
		vs[i] = v
		if i%10 == 0 {
			if a := v.do(t, f.base, "GET", "/static/app.js"); a.code != 200 {
				t.Fatalf("bypassed /static/app.js answered %d", a.code)
			}
		}
		a := v.do(t, f.base, "GET", "/checkout")
		switch {
		case a.code == 200:
			v.number = a.number
		case a.code == 503:
			if !strings.HasPrefix(a.ctype, "application/problem+json") || a.retry == "" || a.ticket == "" {
				t.Fatalf("visitor %d waits: Content-Type %q, Retry-After %q, ticket %q", i, a.ctype, a.retry, a.ticket)
			}
			v.number, v.ticket = a.number, a.ticket
		default:
			t.Fatalf("visitor %d: /checkout answered %d", i, a.code)
		}
		if v.number != int64(i+1) {
			t.Fatalf("visitor %d got number %d (code %d)", i, v.number, a.code)
		}
		if (a.code == 200) != (i < maxActive) {
			t.Fatalf("visitor %d (number %d): %d; want the first %d admitted at join", i, v.number, a.code, maxActive)
		}
		byNumber[v.number] = v
		if a.code == 200 {
			sessions.Add(1)
			go func() { <-held; session(v, v.number <= 5) }()
		}
	}
	joined := time.Since(start)
	close(held)

	// Let the queued visitors in, in number order, as the serving counter passes them.
	deadline := time.Now().Add(timeout)
	next := int64(maxActive + 1)
	for next <= int64(n) {
		sv := f.serving()
		if sv < next {
			if time.Now().After(deadline) {
				t.Fatalf("the line stalled at serving %d (next visitor %d)", sv, next)
			}
			time.Sleep(5 * time.Millisecond) // polling the counter with a deadline
			continue
		}
		for ; next <= sv && next <= int64(n); next++ {
			v := byNumber[next]
			a := v.do(t, f.base, "GET", "/checkout")
			if a.code != 200 || a.number != next {
				t.Fatalf("visitor %d, admitted (serving %d): %d, number %d", next, sv, a.code, a.number)
			}
			sessions.Add(1)
			go session(v, false)
		}
		// A visitor the line has not reached keeps its place across requests (the cookie).
		if v := byNumber[next]; v != nil && next%50 == 1 {
			if a := v.do(t, f.base, "GET", "/checkout"); a.code == 503 && a.number != next {
				t.Fatalf("visitor %d asked again and got number %d", next, a.number)
			} else if a.code == 200 {
				sessions.Add(1)
				go session(v, false)
				next++
			}
		}
	}
	sessions.Wait()
	t.Logf("%d visitors: joined in %s, all through in %s", n, joined.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.problems) > 0 {
		t.Fatalf("the shop saw: %v", s.problems)
	}
	if s.maxActive != maxActive {
		t.Fatalf("the shop saw at most %d admitted visitors at once, want exactly max_active %d", s.maxActive, maxActive)
	}
	if len(s.arrivals) != n {
		t.Fatalf("%d distinct visitors reached the shop, want %d", len(s.arrivals), n)
	}
	for i, num := range s.arrivals {
		if num != int64(i+1) {
			t.Fatalf("arrival %d at the shop was ticket %d: not FIFO (first: %v)", i, num, s.arrivals[:min(i+3, n)])
		}
	}
}
