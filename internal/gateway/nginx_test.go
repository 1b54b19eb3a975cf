package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/gateway"
	"github.com/waitroom/waitroom/internal/nginxtest"
	"github.com/waitroom/waitroom/internal/servetest"
)

// TestNginx runs the crowd check of TestGateCrowd (2,000 visitors, max_active 50) through
// Debian's nginx configured with deploy/nginx/waitroom.conf: nginx's auth_request asks a real
// `waitroom serve --gate` (forward auth only) about every request, and proxies the shop. The
// shop ends sessions as an origin behind forward auth does: DELETE of the ticket, cookie
// cleared. Skipped without nginx; fails without it when CI=true.
func TestNginx(t *testing.T) {
	nginxtest.Require(t)
	if testing.Short() {
		t.Skip("starts nginx and waitroom serve")
	}
	dir := t.TempDir()
	s := newShop(t)

	gate := filepath.Join(dir, "gate.yaml")
	writeFile(t, gate, `
trusted_proxies: [127.0.0.1]
sites:
  - protect:
      - event: `+testEvent+`
        paths: [/checkout, /api/cart]
bypass:
  paths: [/static/]
`)
	api := startServe(t, dir, gate)
	putTestEvent(t, api, 50)
	serving := func() int64 {
		resp, err := http.Get(api + "/v1/events/" + testEvent)
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		var e struct{ Serving int64 }
		if json.NewDecoder(resp.Body).Decode(&e) != nil {
			return -1
		}
		return e.Serving
	}
	s.serving = serving
	s.complete = func(ticket string) error {
		req, _ := http.NewRequest("DELETE", api+"/v1/events/"+testEvent+"/tickets/"+ticket, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 204 {
			return fmt.Errorf("DELETE: %d", resp.StatusCode)
		}
		return nil
	}
	front := startNginx(t, dir, strings.TrimPrefix(api, "http://"), strings.TrimPrefix(s.srv.URL, "http://"))

	// A browser waiting is redirected to the page, coming back to where it was going.
	req, _ := http.NewRequest("GET", front+"/static/app.js", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("bypass through nginx: %v %v", err, resp)
	}
	resp.Body.Close()

	runCrowd(t, frontOf(front, serving), s, 2000, 50, 3*time.Minute)

	// Now the line is empty and the slots free: a browser is admitted at once; with all 50
	// slots taken, the 51st browser is sent to the page.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var last *http.Response
	for range 51 {
		req, _ := http.NewRequest("GET", front+"/checkout?step=1", nil)
		req.Header.Set("Accept", "text/html")
		last, err = noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		last.Body.Close()
	}
	loc := last.Header.Get("Location")
	if last.StatusCode != 302 || !strings.HasPrefix(loc, "/e/"+testEvent+"?") || !strings.Contains(loc, "return=%2Fcheckout%3Fstep%3D1") {
		t.Fatalf("the 51st browser: %d, Location %q", last.StatusCode, loc)
	}
	if c := last.Header.Get("Set-Cookie"); !strings.Contains(c, "waitroom_"+testEvent+"=") || !strings.Contains(c, "HttpOnly") {
		t.Fatalf("the 51st browser's cookie: %q", c)
	}
	page, err := http.Get(front + loc)
	if err != nil || page.StatusCode != 200 {
		t.Fatalf("the waiting page through nginx: %v %v", err, page)
	}
	page.Body.Close()

	nginxPaths(t, front)
	nginxHeaders(t, front)
	nginxtest.PageThrough(t, front, testEvent)
	nginxRoutes(t, front)
	nginxPagePlace(t, front)
}

// TestNginxOneHost: the check and the shop read one host. With a site that protects /checkout
// (shop.example) and one that protects nothing (blog.example) on the same shop, a request line
// naming one host and a Host header naming the other ("GET http://blog.example/checkout" with
// "Host: shop.example") never reaches the shop's /checkout without a place in line; and the
// shop gets the Host the visitor wrote, port included, when it names the host nginx read.
func TestNginxOneHost(t *testing.T) {
	nginxtest.Require(t)
	if testing.Short() {
		t.Skip("starts nginx and waitroom serve")
	}
	dir := t.TempDir()
	shop, reached := recordingShop(t)
	gate := filepath.Join(dir, "gate.yaml")
	writeFile(t, gate, "trusted_proxies: [127.0.0.1]\nsites:\n  - host: shop.example\n    protect:\n      - event: "+testEvent+
		"\n        paths: [/checkout]\n  - host: blog.example\n")
	api := startServe(t, dir, gate)
	putTestEvent(t, api, 1)
	taken, err := http.Post(api+"/v1/events/"+testEvent+"/tickets", "application/json", strings.NewReader("{}"))
	require.NoError(t, err)
	taken.Body.Close()
	require.Equal(t, 201, taken.StatusCode, "the one slot taken: a pass below is a bypass")
	front := startNginx(t, dir, strings.TrimPrefix(api, "http://"), strings.TrimPrefix(shop.URL, "http://"))
	addr := strings.TrimPrefix(front, "http://")
	for _, head := range []string{
		"GET http://blog.example/checkout HTTP/1.1\r\nHost: shop.example\r\n",
		"GET http://BLOG.example:80/checkout HTTP/1.1\r\nHost: shop.example:80\r\n",
		"GET http://shop.example/checkout HTTP/1.1\r\nHost: blog.example\r\n",
		"GET /checkout HTTP/1.1\r\nHost: shop.example:8080\r\n",
		"GET /checkout HTTP/1.1\r\nHost: SHOP.example\r\n",
	} {
		resp, body := rawHead(t, addr, head)
		for _, h := range reached.take() {
			if strings.HasSuffix(h, " /checkout") && strings.HasPrefix(strings.ToLower(h), "shop.example") {
				t.Errorf("%q: the shop's /checkout was reached as %q (%d %s)", head, h, resp.StatusCode, body)
			}
		}
	}
	resp, _ := rawHead(t, addr, "GET /about HTTP/1.1\r\nHost: Blog.Example:8080\r\n")
	require.Equal(t, 200, resp.StatusCode)
	resp, _ = rawHead(t, addr, "GET /about HTTP/1.1\r\nHost: blog.example.:8080\r\n")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, []string{"Blog.Example:8080 /about", "blog.example.:8080 /about"}, reached.take(),
		"the Host as the visitor wrote it, port (and a trailing dot) included")
}

// nginxRoutes: under the waiting room's paths nginx passes on its public routes
// (gateway.PublicRoutes, what the gate's own listener serves) and answers 404 to the rest of the
// API, with or without the admin key, as the gate's listener does.
func nginxRoutes(t *testing.T, front string) {
	const edge = "not a route of the waiting room at this site"
	do := func(method, target string, admin bool) (int, string, string) {
		req, _ := http.NewRequest(method, front+target, strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		if admin {
			req.Header.Set("Authorization", "Bearer "+testAdminKey)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		if strings.HasSuffix(target, "/events") { // a stream: its headers tell
			return resp.StatusCode, resp.Header.Get("Content-Type"), ""
		}
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
	}
	fill := strings.NewReplacer("{event_id}", testEvent, "{ticket_id}", "not-a-ticket", "{name}", "room.js")
	for _, route := range gateway.PublicRoutes {
		method, path, _ := strings.Cut(route, " ")
		for _, target := range []string{fill.Replace(path), fill.Replace(path) + "?lang=en"} {
			code, _, body := do(method, target, false)
			if code == 404 && strings.Contains(body, edge) {
				t.Errorf("%s %s through nginx: refused at the edge, but the gate serves it", method, target)
			}
		}
	}
	for _, c := range []struct{ method, target string }{
		{"PUT", "/v1/events/" + testEvent}, {"PATCH", "/v1/events/" + testEvent}, {"DELETE", "/v1/events/" + testEvent},
		{"POST", "/v1/events/" + testEvent + "/close"}, {"POST", "/v1/events/" + testEvent + "/extend"},
		{"GET", "/v1/events/" + testEvent + "/history"}, {"GET", "/v1/events/"},
		{"POST", "/v1/events/" + testEvent + "/holds"}, {"GET", "/v1/events/" + testEvent + "/seats"},
		{"GET", "/v1/events/" + testEvent + "/tickets/x/admission"}, {"GET", "/v1/events/" + testEvent + "/tickets"},
		{"GET", "//v1/events/" + testEvent + "/history"},
		{"POST", "/v1/events/" + testEvent + "/tickets/x"}, {"OPTIONS", "/v1/events/" + testEvent + "/tickets"},
		{"GET", "/e/" + testEvent + "/x/y"},
	} {
		for _, admin := range []bool{false, true} {
			code, ctype, body := do(c.method, c.target, admin)
			if code != 404 || ctype != "application/problem+json" || !strings.Contains(body, edge) {
				t.Errorf("%s %s through nginx (admin key %v): %d %s %s, want the edge's 404", c.method, c.target, admin, code, ctype, body)
			}
		}
	}
	code, ctype, _ := do("GET", "/v1/events/"+testEvent+"/tickets/not-a-ticket", false)
	require.Equal(t, "application/problem+json", ctype, "Waitroom's own answer (%d) keeps its type", code)
	// A site's own Basic credentials, which browsers send to every path of it, do not get in
	// the page's way (the gate's listener does not read them either): the join is made.
	req, _ := http.NewRequest("POST", front+"/v1/events/"+testEvent+"/tickets", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	req.SetBasicAuth("shopper", "secret")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	joined, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 201, resp.StatusCode, "a join with the site's Basic credentials: %s", joined)
	code, _, body := do("GET", "/v1/events/"+testEvent+"%2fhistory", true) // one segment: the event's public view
	require.Equal(t, 400, code, "%s", body)
}

// nginxPaths: with every slot taken, the forms of a protected path that an origin could route
// to its handler wait (503) or are refused (400 invalid_path, or nginx's own 400); none reaches
// the shop.
func nginxPaths(t *testing.T, front string) {
	for target, want := range map[string]int{
		"/checkout;jsessionid=x": 503, "/checkout.json": 503, "/checkout.": 503, "/checkout%20": 503,
		"/CHECKOUT": 503, "//checkout": 503, "//evil/checkout": 503, "///evil/api/cart": 503, "/api;x/cart": 503, "/checkout::$DATA": 503, "/%63heckout": 503,
		"/static/..;/checkout": 400, "/static/..%5ccheckout": 400, `/static/..\checkout`: 400, "/checkout%00": 400,
		"/checkout%09": 400, "/checkout%2f": 400, "/checkout%252e": 400,
	} {
		resp, body := rawDo(t, front, target)
		if resp.StatusCode != want {
			t.Errorf("%s through nginx: %d %s, want %d", target, resp.StatusCode, body, want)
			continue
		}
		switch {
		case want == 503 && !strings.Contains(string(body), `"code":"waiting_room"`):
			t.Errorf("%s through nginx: %s, want waiting_room", target, body)
		case want == 400 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") &&
			!strings.Contains(string(body), `"code":"invalid_path"`):
			t.Errorf("%s through nginx: %s, want invalid_path", target, body)
		}
	}
}

// nginxHeaders: the shop receives none of a client's headers that it could read as the gate's
// or its proxy's: every X-Waitroom-* name Waitroom defines, the same with "_", the client's
// address, host and original path as other proxies pass them. An X-Waitroom-* name Waitroom
// does not define, which nginx cannot clear, is refused by the check: 400 invalid_header.
func nginxHeaders(t *testing.T, front string) {
	spoofed := append(append([]string{"X_Waitroom_Ticket", "X_Waitroom_Event", "X_Real_IP"}, gateway.ClientHeaders...), gateway.Headers...)
	req, _ := http.NewRequest("GET", front+"/echo", nil)
	for _, k := range spoofed {
		req.Header[k] = []string{"spoofed"}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e struct{ Header http.Header }
	err = json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 200 || err != nil {
		t.Fatalf("/echo through nginx: %d %v", resp.StatusCode, err)
	}
	for k, vs := range e.Header {
		for _, v := range vs {
			if strings.Contains(v, "spoofed") {
				t.Errorf("the shop received the client's %s: %q", k, v)
			}
		}
	}
	if got := e.Header.Get("X-Real-IP"); got != "127.0.0.1" {
		t.Errorf("X-Real-IP at the shop: %q, want nginx's peer 127.0.0.1", got)
	}

	req, _ = http.NewRequest("GET", front+"/echo", nil)
	req.Header.Set("X-Waitroom-Whatever", "spoofed")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/problem+json" ||
		!strings.Contains(string(body), `"code":"invalid_header"`) || !strings.Contains(string(body), `"title":"Header reserved for the waiting room"`) {
		t.Errorf("an undefined X-Waitroom-* name through nginx: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
}

func frontOf(base string, serving func() int64) front { return front{base: base, serving: serving} }

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startServe runs `waitroom serve --gate gate` (this test binary, see TestMain), embedded, with
// its data in dir, and returns the API's base URL once it serves; SIGINT at cleanup.
func startServe(t *testing.T, dir, gate string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "serve", "--addr", "127.0.0.1:0", "--data", filepath.Join(dir, "waitroom.db"), "--gate", gate)
	cmd.Env = append(os.Environ(), envRunMain+"=1", "WAITROOM_ADMIN_KEY="+testAdminKey, "WAITROOM_TOKEN_KEY="+testTokenKey)
	return servetest.Start(t, cmd, 30*time.Second)
}

func putTestEvent(t *testing.T, api string, maxActive int) {
	t.Helper()
	req, _ := http.NewRequest("PUT", api+"/v1/events/"+testEvent,
		// The crowd comes from one address (nginx's X-Forwarded-For names 127.0.0.1): no limit
		// per client.
		strings.NewReader(fmt.Sprintf(`{"name":"Spring sale","max_active":%d,"limits":{"joins_per_client":1000000000}}`, maxActive)))
	req.Header.Set("Authorization", "Bearer "+testAdminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 && resp.StatusCode != 200 {
		t.Fatalf("PUT event: %d", resp.StatusCode)
	}
}

// startNginx runs nginx in the foreground with deploy/nginx/waitroom.conf, its upstreams
// pointed at waitroom (both of the file's instances) and shop and its server on a free loopback
// port, and returns its base URL. extra are more of the file's strings to replace.
func startNginx(t *testing.T, dir, waitroom, shop string, extra ...string) string {
	t.Helper()
	conf, err := os.ReadFile("../../deploy/nginx/waitroom.conf")
	if err != nil {
		t.Fatal(err)
	}
	addr := nginxtest.FreeAddr(t)
	repl := map[string]string{
		"server 127.0.0.1:8080 max_fails": "server " + waitroom + " max_fails",
		"server 127.0.0.1:8081 max_fails": "server " + waitroom + " max_fails",
		"server 127.0.0.1:3000;":          "server " + shop + ";",
		"listen 80 default_server;":       "listen " + addr + " default_server;",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		repl[extra[i]] = extra[i+1]
	}
	writeFile(t, filepath.Join(dir, "waitroom.conf"), nginxtest.Rewrite(t, "deploy/nginx/waitroom.conf", string(conf), repl))
	mainPaths, httpPaths := nginxtest.Paths(dir)
	nginxtest.Start(t, dir, mainPaths+`master_process off;
worker_processes 1;
events { worker_connections 4096; }
http {
    access_log off;`+httpPaths+`    include `+dir+`/waitroom.conf;
}
`, addr)
	return "http://" + addr
}

// TestNginxBesideAnotherDefaultServer: the shipped file's server is the port's default
// server, so included beside another default server of the port (Debian's stock
// sites-enabled/default) nginx refuses the configuration instead of serving the shop from the
// other server, unchecked (helper-78: with "listen 80;" nginx -t only warned that
// "server_name _" was ignored, and every request went past the check).
func TestNginxBesideAnotherDefaultServer(t *testing.T) {
	nginxtest.Require(t)
	dir := t.TempDir()
	conf, err := os.ReadFile("../../deploy/nginx/waitroom.conf")
	if err != nil {
		t.Fatal(err)
	}
	addr := nginxtest.FreeAddr(t)
	writeFile(t, filepath.Join(dir, "waitroom.conf"), nginxtest.Rewrite(t, "deploy/nginx/waitroom.conf", string(conf),
		map[string]string{"listen 80 default_server;": "listen " + addr + " default_server;"}))
	mainPaths, httpPaths := nginxtest.Paths(dir)
	main := filepath.Join(dir, "nginx.conf")
	writeFile(t, main, mainPaths+`events { worker_connections 64; }
http {`+httpPaths+`    server { listen `+addr+` default_server; server_name _; return 200 "the distribution's default site"; }
    include `+dir+`/waitroom.conf;
}
`)
	out, err := exec.Command(nginxtest.Bin, "-t", "-p", dir, "-c", main, "-e", filepath.Join(dir, "error.log")).CombinedOutput()
	require.Error(t, err, "nginx accepted the file beside another default server:\n%s", out)
	require.Contains(t, string(out), "duplicate default server", "%s", out)
}

// TestNginxHostNotServed: with a gate file whose one site names its host, a request that nginx
// (server_name _) sends to the check for another host is refused, 404 not_found, as the gate's
// own listener refuses it, never passed to the shop: whether the visitor writes another Host,
// an address, no Host at all (HTTP/1.0), or an absolute request-target naming another host.
// The site's own host still passes and waits as before.
func TestNginxHostNotServed(t *testing.T) {
	nginxtest.Require(t)
	if testing.Short() {
		t.Skip("starts nginx and waitroom serve")
	}
	dir := t.TempDir()
	shop, reached := recordingShop(t)
	gate := filepath.Join(dir, "gate.yaml")
	writeFile(t, gate, `
trusted_proxies: [127.0.0.1]
sites:
  - host: shop.example
    protect:
      - event: `+testEvent+`
        paths: [/checkout]
`)
	api := startServe(t, dir, gate)
	// Paused: nobody is admitted, so a protected path that reached the shop passed the gate.
	req, _ := http.NewRequest("PUT", api+"/v1/events/"+testEvent, strings.NewReader(`{"name":"Spring sale","max_active":1,"paused":true}`))
	req.Header.Set("Authorization", "Bearer "+testAdminKey)
	put, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	put.Body.Close()
	require.Equal(t, 201, put.StatusCode)
	front := startNginx(t, dir, strings.TrimPrefix(api, "http://"), strings.TrimPrefix(shop.URL, "http://"))
	addr := strings.TrimPrefix(front, "http://")
	send := func(head string) (*http.Response, string) {
		resp, body := rawHead(t, addr, head)
		return resp, string(body)
	}
	for _, head := range []string{
		"GET /checkout/pay HTTP/1.1\r\nHost: other.example\r\n",
		"GET /checkout/pay HTTP/1.1\r\nHost: 10.0.0.1\r\n",
		"GET http://evil.example/checkout/pay HTTP/1.1\r\nHost: shop.example\r\n",
		"GET /checkout/pay HTTP/1.0\r\n",
		"GET /products HTTP/1.1\r\nHost: other.example\r\n",
	} {
		resp, body := send(head)
		require.Equal(t, 404, resp.StatusCode, "%q: %s", head, body)
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"), "%q", head)
		require.Contains(t, body, `"code":"not_found"`, "%q", head)
	}
	resp, body := send("GET /products HTTP/1.1\r\nHost: shop.example\r\n")
	require.Equal(t, 200, resp.StatusCode, body)
	resp, body = send("GET /checkout/pay HTTP/1.1\r\nHost: shop.example\r\n")
	require.Equal(t, 503, resp.StatusCode, body)
	// An API client who waits learns its place as the gate's own listener tells it.
	var p map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &p), body)
	require.Equal(t, "waiting_room", p["code"])
	require.NotEmpty(t, p["ticket_id"])
	require.EqualValues(t, 1, p["position"], body)
	require.EqualValues(t, 1, p["waiting"], body)
	require.Contains(t, p, "eta_s")
	require.Equal(t, []string{"shop.example /products"}, reached.take(), "what reached the shop")
}

// TestNginxPassesOnlyWebSocketUpgrades: the shipped configuration passes a WebSocket handshake
// to the shop and no other Upgrade (an attack: a shop that switched to h2c on an unprotected
// path gave the visitor a connection whose next requests, for any path, never passed the
// check): an Upgrade to h2c reaches the shop as a plain request, without HTTP2-Settings.
func TestNginxPassesOnlyWebSocketUpgrades(t *testing.T) {
	nginxtest.Require(t)
	if testing.Short() {
		t.Skip("starts nginx and waitroom serve")
	}
	dir := t.TempDir()
	var saw atomic.Value
	shop := upgradingOrigin(t, &saw)
	gate := filepath.Join(dir, "gate.yaml")
	writeFile(t, gate, "trusted_proxies: [127.0.0.1]\nsites:\n  - protect:\n      - event: "+testEvent+"\n        paths: [/checkout]\n")
	api := startServe(t, dir, gate)
	putTestEvent(t, api, 1)
	front := startNginx(t, dir, strings.TrimPrefix(api, "http://"), strings.TrimPrefix(shop.URL, "http://"))
	addr := strings.TrimPrefix(front, "http://")
	for _, up := range []string{"h2c", "websocket, h2c", "tls/1.3"} {
		resp, body := rawHead(t, addr, "GET /products HTTP/1.1\r\nHost: shop.example\r\nUpgrade: "+up+
			"\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n")
		require.Equal(t, 200, resp.StatusCode, "%s: %s", up, body)
		require.Equal(t, "shop", string(body), up)
		h := saw.Load().(http.Header)
		require.Empty(t, h.Get("Upgrade"), up)
		require.Empty(t, h.Get("HTTP2-Settings"), up)
	}
	resp, _ := rawHead(t, addr, "GET /products HTTP/1.1\r\nHost: shop.example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n")
	require.Equal(t, 101, resp.StatusCode)
	require.Equal(t, "websocket", saw.Load().(http.Header).Get("Upgrade"))
}

// requests records the requests a shop received, as "Host RequestURI".
type requests struct {
	mu   sync.Mutex
	seen []string
}

// take returns the requests recorded since the last take.
func (q *requests) take() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.seen
	q.seen = nil
	return out
}

// recordingShop is a shop that answers "shop" to everything and records what reached it.
func recordingShop(t *testing.T) (*httptest.Server, *requests) {
	q := &requests{}
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q.mu.Lock()
		q.seen = append(q.seen, r.Host+" "+r.RequestURI)
		q.mu.Unlock()
		_, _ = io.WriteString(w, "shop")
	}))
	t.Cleanup(shop.Close)
	return shop, q
}

// TestNginxRefusalsReachTheVisitor: what the check answers besides 200, 401 and its own 400s
// and 404 reaches the visitor through the shipped nginx configuration as that problem, not as
// nginx's 500 (auth_request keeps only the check's headers: X-Waitroom-Problem names the code):
// a client whose joins_per_client are spent gets 429 rate_limited with Retry-After, a closed
// event's path 410 event_closed, and a protected path whose event is gone 503
// waiting_room_not_set_up with Retry-After. None reaches the shop.
func TestNginxRefusalsReachTheVisitor(t *testing.T) {
	nginxtest.Require(t)
	if testing.Short() {
		t.Skip("starts nginx and waitroom serve")
	}
	dir := t.TempDir()
	var reached atomic.Int64
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/checkout" || reached.Add(1) > 1 { // the one admitted visitor's request
			t.Errorf("the shop was reached: %s", r.URL)
		}
	}))
	t.Cleanup(shop.Close)
	gate := filepath.Join(dir, "gate.yaml")
	writeFile(t, gate, "trusted_proxies: [127.0.0.1]\nsites:\n  - protect:\n      - event: "+testEvent+"\n        paths: [/checkout]\n")
	api := startServe(t, dir, gate)
	admin := func(method, body string) {
		t.Helper()
		req, _ := http.NewRequest(method, api+"/v1/events/"+testEvent, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testAdminKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Less(t, resp.StatusCode, 300, "%s the event", method)
	}
	admin("PUT", `{"name":"Spring sale","max_active":1,"limits":{"joins_per_client":1,"join_window_s":3600}}`)
	front := startNginx(t, dir, strings.TrimPrefix(api, "http://"), strings.TrimPrefix(shop.URL, "http://"))
	problem := func(want int) (*http.Response, map[string]any) {
		t.Helper()
		resp, body := rawDo(t, front, "/checkout") // no cookie: every request joins anew
		require.Equal(t, want, resp.StatusCode, "%s", body)
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
		var p map[string]any
		require.NoError(t, json.Unmarshal(body, &p), "%s", body)
		require.EqualValues(t, want, p["status"])
		return resp, p
	}
	resp, _ := rawDo(t, front, "/checkout")
	require.Equal(t, 200, resp.StatusCode, "the first visitor: a free slot")
	resp, p := problem(429)
	require.Equal(t, "rate_limited", p["code"])
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	require.Positive(t, p["retry_after_s"])

	// A preflight waits without a place: no ticket, number or Retry-After, and still JSON.
	resp, body := rawHead(t, strings.TrimPrefix(front, "http://"), "OPTIONS /checkout HTTP/1.1\r\nHost: shop.example\r\n")
	require.Equal(t, 503, resp.StatusCode, "%s", body)
	require.NoError(t, json.Unmarshal(body, &p), "%s", body)
	require.Equal(t, "waiting_room", p["code"])
	require.Nil(t, p["ticket_id"])
	require.Nil(t, p["number"])
	require.NotEmpty(t, p["waiting_room_url"])

	// Events the gate cannot join for a visitor: refused as the check's 401 problems, to
	// browsers too, never sent to an empty place.
	admin("PATCH", `{"identity_required":true,"limits":{"joins_per_client":100}}`)
	for _, accept := range []string{"application/json", "text/html"} {
		resp, body = rawHead(t, strings.TrimPrefix(front, "http://"), "GET /checkout HTTP/1.1\r\nHost: shop.example\r\nAccept: "+accept+"\r\n")
		require.Equal(t, 401, resp.StatusCode, "%s", body)
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
		require.NoError(t, json.Unmarshal(body, &p), "%s", body)
		require.Equal(t, "identity_required", p["code"])
		require.Equal(t, "This event needs an identity", p["title"])
	}
	admin("PATCH", `{"identity_required":false,"challenge":{"type":"pow","difficulty":8}}`)
	resp, p = problem(401)
	require.Equal(t, "challenge_required", p["code"])
	require.Empty(t, resp.Header.Get("Location"))

	admin("PATCH", `{"challenge":null,"closes_at":"2000-01-01T00:00:00Z"}`)
	resp, p = problem(410)
	require.Equal(t, "event_closed", p["code"])
	require.Empty(t, resp.Header.Get("Retry-After"), "a refusal of the check's own carries no Retry-After of nginx's")

	admin("DELETE", "")
	resp, p = problem(503)
	require.Equal(t, "waiting_room_not_set_up", p["code"])
	require.Equal(t, "Waiting room not set up", p["title"])
	require.Equal(t, "2", resp.Header.Get("Retry-After"))
	require.EqualValues(t, 1, reached.Load())
}

// TestNginxWaitroomUnreachable: with forward auth every request of the site passes through the
// check, so when no instance answers it (both refuse connections, or accept and never answer
// within the check's proxy_read_timeout) every path, protected or not, is answered 503 with
// Retry-After (a problem, to browsers too) within seconds, not nginx's
// bare 500 after 60 s, and nothing reaches the shop: the configuration fails closed. The
// waiting room's own paths (the page, joins, polls, live updates), proxied to the same
// instances, get the same 503 waiting_room_unavailable, not nginx's bare 502 or 504.
func TestNginxWaitroomUnreachable(t *testing.T) {
	nginxtest.Require(t)
	if testing.Short() {
		t.Skip("starts nginx")
	}
	shop, reached := recordingShop(t)
	// A Waitroom that hangs: it accepts connections and never answers.
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { hung.Close() })
	var held sync.WaitGroup
	conns := make(chan net.Conn, 64)
	held.Add(1)
	go func() {
		defer held.Done()
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	t.Cleanup(func() {
		hung.Close()
		held.Wait()
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
	for _, c := range []struct {
		name, waitroom string
		extra          []string
		within         time.Duration
	}{
		// Nothing listens on a port that was free a moment ago.
		{"down", nginxtest.FreeAddr(t), nil, 3 * time.Second},
		// The 5 s read timeout is shortened for the test; the two tries take 2 × 1 s.
		{"hung", hung.Addr().String(), []string{"proxy_read_timeout 5s;", "proxy_read_timeout 1s;", "proxy_read_timeout 10s;", "proxy_read_timeout 1s;"}, 4 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			front := startNginx(t, dir, c.waitroom, strings.TrimPrefix(shop.URL, "http://"), c.extra...)
			addr := strings.TrimPrefix(front, "http://")
			// The shop's paths, through the check; and the waiting room's own, proxied to it: the
			// page, a join, a poll and (not on the hung one: a live update waits an hour for
			// its first byte) the live updates.
			requests := []string{"GET /e/ev", "POST /v1/events/ev/tickets", "GET /v1/events/ev/tickets/abc"}
			if c.name == "down" {
				requests = append(requests, "GET /v1/events/ev/tickets/abc/ws", "GET /v1/events/ev/tickets/abc/events")
			}
			for _, path := range []string{"/checkout", "/products", "/static/app.js"} {
				requests = append(requests, "GET "+path)
			}
			for _, request := range requests {
				for _, accept := range []string{"application/json", "text/html"} {
					path := request
					start := time.Now()
					resp, body := rawHead(t, addr, request+" HTTP/1.1\r\nHost: shop.example\r\nContent-Length: 0\r\nAccept: "+accept+"\r\n")
					took := time.Since(start)
					require.Equal(t, 503, resp.StatusCode, "%s %s: %s", path, accept, body)
					require.Equal(t, "5", resp.Header.Get("Retry-After"), "%s %s", path, accept)
					require.Equal(t, "no-store", resp.Header.Get("Cache-Control"), "%s %s", path, accept)
					require.Less(t, took, c.within, "%s %s", path, accept)
					require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
					var p map[string]any
					require.NoError(t, json.Unmarshal(body, &p), "%s", body)
					require.Equal(t, "waiting_room_unavailable", p["code"])
					require.EqualValues(t, 503, p["status"])
					require.EqualValues(t, 5, p["retry_after_s"])
				}
			}
			require.Empty(t, reached.take(), "what reached the shop")
		})
	}
}

// nginxPagePlace: through nginx (forward auth), a visitor sent to the page by another site's
// form joins on the page, whose call nginx passes to the API's listener, and gets the gate's
// cookie for that ticket; back on /checkout with it, the check holds that place (the page it
// sends the visitor to names the same ticket) instead of joining them again at the back.
// Run with every slot taken, so the page's ticket waits.
func nginxPagePlace(t *testing.T, front string) {
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, target string, c *http.Cookie, h ...string) (*http.Response, []byte) {
		t.Helper()
		var body io.Reader
		if target == "/checkout" && method == "POST" {
			body = strings.NewReader("q=1") // the form's
		}
		req, _ := http.NewRequest(method, front+target, body)
		for i := 0; i+1 < len(h); i += 2 {
			req.Header.Set(h[i], h[i+1])
		}
		if c != nil {
			req.AddCookie(c)
		}
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	ticketOf := func(resp *http.Response) string {
		t.Helper()
		loc, err := url.Parse(resp.Header.Get("Location"))
		require.NoError(t, err)
		require.Equal(t, "/e/"+testEvent, loc.Path, "sent to the page")
		return loc.Query().Get("ticket")
	}
	cookieOf := func(resp *http.Response) *http.Cookie {
		for _, c := range resp.Cookies() {
			if c.Name == gateway.CookieName(testEvent) {
				return c
			}
		}
		return nil
	}

	resp, _ := send("POST", "/checkout", nil, "Content-Type", "application/x-www-form-urlencoded", "Accept", "text/html",
		"Origin", "https://other.example", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document")
	require.Contains(t, []int{302, 303}, resp.StatusCode)
	require.Empty(t, ticketOf(resp), "another site's form took a place")
	require.Nil(t, cookieOf(resp))

	resp, body := send("POST", "/v1/events/"+testEvent+"/tickets", nil, "Sec-Fetch-Site", "same-origin", "Accept", "application/json")
	require.Equal(t, 201, resp.StatusCode, "%s", body)
	var tk struct {
		TicketID string `json:"ticket_id"`
		Status   string `json:"status"`
	}
	require.NoError(t, json.Unmarshal(body, &tk))
	require.Equal(t, "QUEUED", tk.Status, "every slot is taken")
	c := cookieOf(resp)
	require.NotNil(t, c, "nginx passed on no gate cookie with the page's join")
	require.Equal(t, tk.TicketID, c.Value)

	resp, _ = send("GET", "/checkout", c, "Accept", "text/html")
	require.Contains(t, []int{302, 303}, resp.StatusCode)
	require.Equal(t, tk.TicketID, ticketOf(resp), "the check took a second place")
}
