package gateway

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/waitroom/waitroom/internal/pathrule"
)

// TestPathRuleDoesNotAllocate: an admitted visitor's ordinary request stays cheap: reading its
// path, routing it and sorting its headers allocate nothing.
func TestPathRuleDoesNotAllocate(t *testing.T) {
	f, err := Parse("gate.yaml", []byte("sites:\n  - origin: http://o\n    protect:\n      - event: e\n        paths: [/checkout, /api/cart]\n"+
		"bypass:\n  paths: [/static/]\n"))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := compile(f)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{"Accept": {"*/*"}, "Cookie": {"waitroom_e=x"}, "User-Agent": {"bench"}, "X-Forwarded-For": {"192.0.2.1"}}
	for _, path := range []string{"/checkout", "/checkout/pay/", "/CHECKOUT/Pay", "/api/cart", "/products/42", "/static/app.js"} {
		n := testing.AllocsPerRun(100, func() {
			p, bad := pathrule.Read(path, "")
			if bad != "" {
				t.Fatal(bad)
			}
			_ = rt.route("shop.example", p, "", netip.Addr{}, h)
			for k := range h {
				_ = rt.gateHeader(k)
			}
		})
		if n != 0 {
			t.Errorf("%s: %v allocations", path, n)
		}
	}
}

// TestFileNamesRoute: a protected file matches its name without its script's or page's
// extensions (pathrule's segmentMatches), a version or a date never.
func TestFileNamesRoute(t *testing.T) {
	f, err := Parse("gate.yaml", []byte("sites:\n  - origin: http://o\n    protect:\n      - event: e\n        paths: [/v1.2/checkout, /pay.v2.php, /api/v1.php/, /tickets/2026.12.24]\n"))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := compile(f)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"/v1.2/checkout": "e", "/v1/checkout": "", "/pay.v2": "e", "/Pay.V2.": "e", "/pay": "",
		"/pay.v3": "", "/api/v1.php/x": "e", "/api/v1/x": "", "/tickets/2026/06/01": "", "/tickets/2026.12.24.html": "e"} {
		p, bad := pathrule.Read(path, "")
		if bad != "" {
			t.Fatal(bad)
		}
		if got := rt.route("shop.example", p, "", netip.Addr{}, nil).event; got != want {
			t.Errorf("%s: event %q, want %q", path, got, want)
		}
	}
}

// BenchmarkPathRule: reading and routing a protected path, a path of the site that is not, and
// one whose query is read (a front controller's).
func BenchmarkPathRule(b *testing.B) {
	f, _ := Parse("gate.yaml", []byte("sites:\n  - origin: http://o\n    protect:\n      - event: e\n        paths: [/checkout, /api/cart, /pay.php]\n"))
	rt, _ := compile(f)
	for _, c := range []struct{ name, path, query string }{
		{"protected", "/checkout/pay/step-2", ""},
		{"passed", "/products/42/reviews", ""},
		{"query", "/", "page=products&rest_route=/shop/v1/items&q=shoes"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p, _ := pathrule.Read(c.path, "")
				_ = rt.route("shop.example", p, c.query, netip.Addr{}, nil)
			}
		})
	}
}

// FuzzReadHost: readHost never panics (":80" did), and a host it reads reads as itself again.
func FuzzReadHost(f *testing.F) {
	for _, s := range []string{"", ":", ":80", "[]", "[::1]:8080", "[::FFFF:127.0.0.1]", "Vip.Example.:80", "a..b", "[v.example]", "x%2e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		got, ok := readHost(h)
		if !ok {
			return
		}
		if again, ok := readHost(got); !ok || again != got {
			t.Fatalf("readHost(%q) = %q, which reads as %q, %v", h, got, again, ok)
		}
	})
}

// TestTicketOfAnswer: the ticket id and event id of a ticket's answer, from the API's prefix
// or, in any other shape, by decoding it; nothing from an answer that is not JSON.
func TestTicketOfAnswer(t *testing.T) {
	for _, c := range []struct {
		body   string
		id, ev string
		ok     bool
	}{
		{`{"ticket_id":"abc_-1","event_id":"spring-sale","status":"QUEUED"}`, "abc_-1", "spring-sale", true},
		{`{"event_id":"spring-sale","ticket_id":"abc"}`, "abc", "spring-sale", true},
		{`{"ticket_id":"a\"b","event_id":"e"}`, `a"b`, "e", true},
		{`{"ticket_id":"a\u0062","event_id":"e"}`, "ab", "e", true},
		{`{"ticket_id":"a","event_id":"e\u0066"}`, "a", "ef", true},
		{`not json`, "", "", false},
	} {
		id, ev, ok := ticketOfAnswer([]byte(c.body))
		if id != c.id || ev != c.ev || ok != c.ok {
			t.Errorf("%s: %q %q %v, want %q %q %v", c.body, id, ev, ok, c.id, c.ev, c.ok)
		}
	}
}
