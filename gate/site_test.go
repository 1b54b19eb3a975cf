package gate_test

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/waitroom/waitroom/gate"
	"github.com/waitroom/waitroom/internal/token"
)

// TestSiteDecidesPathsByThePathRule: Site, wrapping a whole site, protects what any origin could
// read as under a protected path, by the waiting room's path rule (the gate's and the
// forward-auth check's), not by the site's router: a catch-all file server serves "/checkout/",
// "/%63heckout/" and "/CHECKOUT" (on a case-insensitive disk) as the checkout, so these wait. A
// path that servers read in different ways is refused whatever it would match; a bypass path
// and the rest of the site pass.
func TestSiteDecidesPathsByThePathRule(t *testing.T) {
	adm := token.NewAdmissions(keys(t, secretA))
	room := newFakeRoom(t, adm)
	clock := newFakeClock(t0)
	g, _ := newGate(t, room, clock, func(c *gate.Config) {
		c.Paths = []string{"/checkout", "/api/cart/"}
		c.BypassPaths = []string{"/checkout/help/"}
	})
	site := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "site") })
	h := g.Site(site)
	for _, c := range []struct {
		path string
		want int // 200 passed, 401 waits, 400 refused
	}{
		{"/checkout", 401}, {"/checkout/", 401}, {"/checkout/pay", 401}, {"/%63heckout/", 401}, {"/CHECKOUT", 401},
		{"/checkout;x", 401}, {"/checkout.json", 401}, {"/Checkout.", 401}, {"//checkout", 401}, {"/static/../checkout", 401},
		{"/index.php/checkout", 401}, {"/(S(x))/checkout", 401}, {"/api/cart", 401}, {"/API/Cart/items", 401},
		{"/?pagename=checkout", 401}, {"/search?q=checkout", 401}, {"/index.php?route=checkout/checkout", 401},
		{"/checkout%2F", 400}, {"/checkout%2f", 400}, {"/%63heckout%2F", 400}, {"/checkout%5C", 400}, {"/..;/checkout", 400},
		{"/check%252Fout", 400}, {"/checkout%00", 400},
		{"/", 200}, {"/checkouts", 200}, {"/products/42", 200}, {"/api/carts", 200}, {"/checkout/help/faq", 200},
	} {
		req := rawGet(c.path)
		rec := do(h, req)
		if rec.Code != c.want {
			t.Errorf("%s: %d %q, want %d", c.path, rec.Code, rec.Body, c.want)
			continue
		}
		switch c.want {
		case 400:
			if p := problem(t, rec); p["code"] != "invalid_path" {
				t.Errorf("%s: problem %v, want invalid_path", c.path, p)
			}
		case 401:
			if p := problem(t, rec); p["code"] != "admission_required" {
				t.Errorf("%s: problem %v, want admission_required", c.path, p)
			}
		}
	}

	// An admitted visitor passes on every protected path; a bad path is refused all the same.
	tok := mint(t, adm, "concert", 7, t0.Add(time.Minute))
	for path, want := range map[string]int{"/%63heckout/": 200, "/checkout%2F": 400} {
		req := rawGet(path)
		req.Header.Set("Authorization", "Bearer "+tok)
		if rec := do(h, req); rec.Code != want {
			t.Errorf("admitted %s: %d %q, want %d", path, rec.Code, rec.Body, want)
		}
	}

	// PathsIgnoreQuery: the query is not read; no Paths: every path waits.
	g2, _ := newGate(t, room, newFakeClock(t0), func(c *gate.Config) {
		c.Paths, c.PathsIgnoreQuery = []string{"/checkout"}, true
	})
	if rec := do(g2.Site(site), rawGet("/search?q=checkout")); rec.Code != 200 {
		t.Errorf("query ignored: %d, want 200", rec.Code)
	}
	g3, _ := newGate(t, room, newFakeClock(t0), nil)
	if rec := do(g3.Site(site), rawGet("/anything")); rec.Code != 401 {
		t.Errorf("no Paths: %d, want 401", rec.Code)
	}
}

// rawGet is an API client's GET of target, sent as written (the request line's target).
func rawGet(target string) *http.Request {
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + target + " HTTP/1.1\r\nHost: shop.example\r\nAccept: application/json\r\n\r\n")))
	if err != nil {
		panic(err)
	}
	return req
}

// TestSitePathsAreChecked: Paths and BypassPaths are refused by New as the gate file's are.
func TestSitePathsAreChecked(t *testing.T) {
	for _, c := range []gate.Config{
		{Paths: []string{"checkout"}}, {Paths: []string{"/a/../checkout"}}, {Paths: []string{"/checkout;x"}},
		{Paths: []string{"/checkout%2F"}}, {BypassPaths: []string{"static/"}},
	} {
		c.WaitingRoomURL, c.EventID = "http://room.example", "concert"
		if g, err := gate.New(c); err == nil {
			g.Close()
			t.Errorf("%+v: accepted", c)
		} else if !strings.Contains(err.Error(), "Paths") {
			t.Errorf("%+v: %v, want an error naming the field", c, err)
		}
	}
}

// TestHandoffKeepsTheVisitorsAdmission: a hand-off (?waitroom_token=) does not replace a live
// admission of another ticket held in the cookie (a link from any site may carry a token of its
// choice), and renews one of the same ticket; the default cookie is the event's own, so two
// events' gates on one site keep each other's.
func TestHandoffKeepsTheVisitorsAdmission(t *testing.T) {
	adm := token.NewAdmissions(keys(t, secretA))
	room := newFakeRoom(t, adm)
	g, _ := newGate(t, room, newFakeClock(t0), nil)
	if g.CookieName() != "waitroom_admission_concert" {
		t.Fatalf("cookie %q, want the event's own", g.CookieName())
	}
	var s seen
	h := g.Handler(s.handler())
	mine := mint(t, adm, "concert", 42, t0.Add(time.Minute))
	planted := mint(t, adm, "concert", 666, t0.Add(time.Minute))
	renewed := mint(t, adm, "concert", 42, t0.Add(2*time.Minute))

	req := pageRequest("https://shop.example/checkout?waitroom_token=" + planted)
	req.AddCookie(&http.Cookie{Name: g.CookieName(), Value: mine})
	rec := do(h, req)
	if rec.Code != 303 || len(rec.Result().Cookies()) != 0 {
		t.Fatalf("planted token: %d, cookies %v; want 303 and the visitor's cookie kept", rec.Code, rec.Result().Cookies())
	}
	req = pageRequest("https://shop.example/checkout?waitroom_token=" + renewed)
	req.AddCookie(&http.Cookie{Name: g.CookieName(), Value: mine})
	rec = do(h, req)
	if c := rec.Result().Cookies(); rec.Code != 303 || len(c) != 1 || c[0].Value != renewed {
		t.Fatalf("same ticket: %d, cookies %v; want 303 and the fresher token", rec.Code, c)
	}
	// A POST hand-off passes on the held admission.
	post := httptestPost("https://shop.example/checkout?waitroom_token=" + planted)
	post.AddCookie(&http.Cookie{Name: g.CookieName(), Value: mine})
	if rec := do(h, post); rec.Code != 200 || len(s.admits) != 1 || s.admits[0].Number != 42 {
		t.Fatalf("POST: %d, admissions %+v; want ticket 42's", rec.Code, s.admits)
	}

	// Another event's gate on the same site neither reads nor deletes this cookie.
	other, _ := newGate(t, room, newFakeClock(t0), func(c *gate.Config) { c.EventID = "other" })
	req = pageRequest("https://shop.example/other")
	req.AddCookie(&http.Cookie{Name: g.CookieName(), Value: mine})
	rec = do(other.Handler(s.handler()), req)
	if rec.Code != 303 || len(rec.Result().Cookies()) != 0 {
		t.Fatalf("other event: %d, cookies %v; want 303 to its line, this event's cookie untouched", rec.Code, rec.Result().Cookies())
	}
}

// httptestPost is a form POST to target.
func httptestPost(target string) *http.Request {
	req, _ := http.NewRequest("POST", target, strings.NewReader("card=1"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return req
}

// TestSiteTakesAHandoffOnAnyPage: the event's redirect_url need not be under Paths: a hand-off
// to a page Site lets through sets the cookie and takes the token out of the address as on a
// protected page; a token that does not verify is taken out all the same, and sets nothing.
func TestSiteTakesAHandoffOnAnyPage(t *testing.T) {
	adm := token.NewAdmissions(keys(t, secretA))
	room := newFakeRoom(t, adm)
	g, _ := newGate(t, room, newFakeClock(t0), func(c *gate.Config) { c.Paths = []string{"/checkout"} })
	var s seen
	h := g.Site(s.handler())
	tok := mint(t, adm, "concert", 7, t0.Add(time.Minute))
	rec := do(h, pageRequest("https://shop.example/?from=room&waitroom_token="+tok))
	if c := rec.Result().Cookies(); rec.Code != 303 || rec.Header().Get("Location") != "/?from=room" || len(c) != 1 || c[0].Value != tok {
		t.Fatalf("hand-off to /: %d %q cookies %v; want 303 /?from=room and the cookie", rec.Code, rec.Header().Get("Location"), c)
	}
	rec = do(h, pageRequest("https://shop.example/?waitroom_token=nonsense"))
	if rec.Code != 303 || rec.Header().Get("Location") != "/" || len(rec.Result().Cookies()) != 0 {
		t.Fatalf("a bad token on /: %d %q cookies %v; want 303 / and no cookie", rec.Code, rec.Header().Get("Location"), rec.Result().Cookies())
	}
	if rec := do(h, pageRequest("https://shop.example/")); rec.Code != 200 || s.calls != 1 {
		t.Fatalf("/ without a token: %d, %d calls; want 200 from the site", rec.Code, s.calls)
	}
}
