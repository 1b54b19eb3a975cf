package gateway_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/text/unicode/norm"

	"github.com/waitroom/waitroom/internal/gateway"
)

// pathFile protects /checkout and /api/cart, and bypasses /static/ (no bypass under a
// protected prefix: whatever reaches the origin unadmitted must be outside them).
const pathFile = `
trusted_proxies: [127.0.0.1]
sites:
  - origin: ORIGIN
    protect:
      - event: spring-sale
        paths: [/checkout, /api/cart, /pay.php]
bypass:
  paths: [/static/]
`

// rawDo sends a request whose request-target is written as given (a backslash, say, which
// net/http's client would escape) and reads the answer.
func rawDo(t testing.TB, base, target string) (*http.Response, []byte) {
	t.Helper()
	return rawHead(t, strings.TrimPrefix(base, "http://"), "GET "+target+" HTTP/1.1\r\nHost: shop.example\r\n")
}

// rawHead sends a request to addr that starts with head (the request line and headers, each
// ending in CRLF, written as given), asking for JSON on a connection closed after it, and
// reads the answer.
func rawHead(t testing.TB, addr, head string) (*http.Response, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, head+"Accept: application/json\r\nConnection: close\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

// TestPathForms: every form of a protected path that an origin could route to its protected
// handler is protected (or refused) by the reverse proxy and by the forward-auth check, read
// from X-Original-URI or X-Forwarded-Uri; what passes reaches the origin as exactly the path the
// gate matched.
func TestPathForms(t *testing.T) {
	const (
		protected = "protected" // proxy: 503 waiting, the origin not reached; check: 401
		refused   = "refused"   // 400 invalid_path at both doors, the origin not reached
	)
	for _, tc := range []struct {
		target string // the request-target, as sent
		want   string // protected, refused, or the path the origin receives (the check: pass)
	}{
		// The forms.
		{"/checkout;jsessionid=x", protected}, // Tomcat, Spring: ";…" parameters dropped
		{"/checkout.json", protected},         // Rails: the same action, format json
		{"/checkout.", protected},             // IIS drops trailing dots
		{"/checkout%20", protected},           // … and spaces
		{"/checkout%00", refused},
		{"/checkout%09", refused},
		{"/static/..%5ccheckout", refused}, // IIS: \ is /
		{`/static/..\checkout`, refused},
		{`/checkout\`, refused},
		// More of each kind.
		{"/CHECKOUT", protected}, {"/ChEcKoUt/pay", protected}, {"/cHeCkOuT.JSON", protected},
		{"/checkout%20%20", protected}, {"/checkout.%20.", protected}, {"/checkout;a=1;b=2/pay", protected},
		{"/checkout%3bjsessionid=x", protected}, {"/checkout::$DATA", protected}, {"/checkout:x", protected},
		{"/api;v=1/cart", protected}, {"/api./cart", protected}, {"/api%20/cart.xml", protected},
		{"/;x/checkout", protected}, {"//checkout", protected}, {"///checkout/", protected},
		{"/checkout/", protected}, {"/static/../checkout", protected}, {"/static/%2e%2e/checkout", protected},
		{"/%2e%2e/checkout", protected}, {"/./checkout", protected}, {"/%63heckout", protected},
		{"/checkout/../x", protected},     // an origin that does not resolve ".." routes it to /checkout
		{"/checkout;/../x", protected},    // … and one that does: Tomcat reads /checkout/../x
		{"/%EF%BD%83heckout", protected},  // fullwidth c: NFKC "checkout"
		{"/chec%E2%84%AAout", protected},  // the Kelvin sign: K
		{"/check%C2%ADout", protected},    // a soft hyphen, which normalisers drop
		{"/check%E2%80%8Bout", protected}, // a zero-width space
		{"/%EF%BB%BFcheckout", protected}, // a byte order mark
		{"/checkout%EF%B8%8F", protected}, // a variation selector
		{"/check%CD%8Fout", protected},    // a combining grapheme joiner
		{"/check%E3%85%A4out", protected}, // a Hangul filler
		// Dropped, they would make a dot segment or an empty one that the origin resolves.
		{"/x/.%E2%80%8B./checkout", refused}, {"/static/..%C2%AD/checkout", refused},
		{"/x/%E2%80%8B/../checkout", refused}, {"/?r=/static/.%E2%80%8B./checkout", protected},
		{"/a%E2%80%8Cb", "/a%E2%80%8Cb"}, // a word's zero-width non-joiner (Persian) is no structure
		{"/CHECKO~1", protected},         // IIS: a short (8.3) name of checkout…
		{"/check~12.htm/pay", protected}, // … with a number and an extension
		{"/API/CART~1.JSO", protected},
		{"/CHECKX~1", "/CHECKX~1"},         // another name's
		{"/checkout~x", "/checkout~x"},     // not a short name, nor checkout
		{"/static/ch~1", "/static/ch~1"},   // not under a protected directory
		{"/%C4%B0/../checkout", protected}, // İ, then cleaned away
		{"/.00/CheCkout", protected},       // Rails reads ".00" as "" with the format 00
		{"/x/:y/checkout", "/x/:y/checkout"}, {"/api/.x/cart", protected}, {"/.env", "/.env"},
		{"/checkout%0a", refused}, {"/checkout%0d", refused}, {"/checkout%7f", refused},
		{"/checkout%2f", refused}, {"/static%2f..%2fcheckout", refused}, {"/x%2F..%2Fcheckout", refused},
		{"/checkout%252e", refused}, {"/%252e%252e/checkout", refused}, {"/checkout%25%32%65json", refused},
		{"/checkout%3f", refused}, {"/checkout%23", refused}, // a decoded ? or # (a proxy re-splitting)
		{"/static/..;/checkout", refused}, {"/static/.;x/checkout", refused}, {"/static/..;x=1/checkout", refused},
		{"/foo/;/../checkout", refused}, {"/static/;/../checkout", refused}, {"/foo/;x/../api/cart", refused},
		{"/foo/.json/../checkout", refused}, {"/foo/:x/../checkout", refused}, {"/static/..:x/checkout", refused},
		{"/static/.../checkout", refused}, {"/static/.%20/checkout", refused}, {"/checkout/...", refused},
		{"/%C0%AFcheckout", refused}, {"/checkout%FF", refused}, // overlong /, invalid UTF-8
		{"/static%EF%BC%8F..%EF%BC%8Fcheckout", refused}, // fullwidth solidus
		{"/checkout%EF%BC%8Ejson", refused},              // fullwidth full stop
		// A PHP front controller routes what follows the script as the path; ASP.NET drops a
		// cookieless-session segment.
		{"/index.php/checkout", protected}, {"/public/index.php/checkout", protected},
		{"/index.php/api/cart", protected}, {"/INDEX.PHP/Checkout/pay", protected}, {"/app.php7/checkout", protected},
		{"/x.phtml/checkout", protected}, {"/index.php;x/checkout", protected}, {"/index.php./checkout", protected},
		{"/static/index.php/checkout", protected}, // not bypassed: one of its readings is /checkout
		// A front controller installed in a directory routes its PATH_INFO under that
		// directory: Laravel in /api/ serves /api/cart as /api/index.php/cart too.
		{"/api/index.php/cart", protected}, {"/API/app.cgi/Cart/items", protected},
		{"/api//index.php;x/cart.json", protected}, {"/api/index.php/carts", "/api/index.php/carts"},
		{"/x/index.php/cart", "/x/index.php/cart"},
		// CGI, FastCGI and IIS scripts take PATH_INFO too.
		{"/cgi-bin/index.py/checkout", protected}, {"/index.cgi/checkout", protected}, {"/dispatch.fcgi/checkout", protected},
		{"/app.pl/checkout", protected}, {"/mt.CGI/checkout", protected}, {"/x.aspx/checkout", protected}, {"/a.rb;x/checkout", protected},
		{"/static/app.cgi/checkout", protected}, {"/isapi.dll/checkout", protected}, {"/x.jsp/checkout", protected},
		{"/app.wsgi/checkout", protected}, {"/app.psgi/checkout", protected}, {"/x.pht/checkout", protected},
		// Apache's mod_mime maps a handler on any of a name's extensions.
		{"/index.php.en/checkout", protected}, {"/cgi-bin/index.py.bak/checkout", protected},
		{"/(S(abc123))/checkout", protected}, {"/(A(x)S(y)F(z))/api/cart", protected}, {"/shop/(s(x))/../checkout", refused},
		// An origin that reads the request-target against a base URL (Node's new URL(req.url,
		// base), Go's url.Parse, Python's urlsplit) takes "//x" as a host: the rest is its path.
		{"//evil/checkout", protected}, {"///evil/checkout", protected}, {"//u@x:1/api/cart", protected},
		{"//shop.example/CHECKOUT.json", protected}, {"//evil/x/../checkout", protected}, {"//static/checkout", protected},
		{"//evil/products", "/evil/products"}, {"//evil", "/evil"},
		{"/index.php", "/index.php"}, {"/index.php/products", "/index.php/products"}, {"/index.phpx/checkout", "/index.phpx/checkout"},
		{"/v1.2/checkout", "/v1.2/checkout"}, {"/app.js/checkout", "/app.js/checkout"}, {"/index.cgix/checkout", "/index.cgix/checkout"},
		{"/jquery.min.js/checkout", "/jquery.min.js/checkout"}, {"/a..b/checkout", "/a..b/checkout"},
		{"/(S(x))/products", "/(S(x))/products"}, {"/(checkout)", "/(checkout)"}, {"/static/index.php/app.js", "/static/index.php/app.js"},
		// Front controllers that route by the query: WordPress, WooCommerce, OpenCart, CodeIgniter.
		{"/?pagename=checkout", protected}, {"/?rest_route=/api/cart/items", protected}, {"/?wc-ajax=checkout", protected},
		{"/index.php?/checkout", protected}, {"/index.php?route=checkout/checkout", protected}, {"/?a=1&page=CHECKOUT.json", protected},
		{"/?a=1;p=checkout", protected}, {"/?r=%2Fapi%2Fcart", protected}, {"/?r=api%5Ccart", protected}, {"/?r=api\\cart", protected},
		{"/?r=index.php/checkout", protected}, {"/x?next=/static/../checkout", protected}, {"/?p=%EF%BD%83heckout", protected},
		{"/?p=+checkout+", protected}, {"/products?/checkout=", protected},
		// A route in the query is read under a protected prefix's tails too: WordPress serves
		// /wp-json/wc/store/v1/checkout as /?rest_route=/wc/store/v1/checkout (here /api/cart
		// as /?rest_route=/cart); a value that is no absolute path is not a route.
		{"/?rest_route=/cart", protected}, {"/index.php?rest_route=/cart/items", protected},
		{"/?rest_route=%2FCart%2Fitems", protected}, {"/?x=1&r=/cart.json", protected},
		{"/?q=cart", "/?q=cart"}, {"/?r=/x/cart", "/?r=/x/cart"}, {"/?r=/carts", "/?r=/carts"},
		// A front controller in a directory reads a value from there: WordPress in /api/
		// serves /api/cart as /api/?pagename=cart, from any page below it.
		{"/api/?p=cart", protected}, {"/api/index.php?route=cart/items", protected}, {"/api/x/y/?p=CART", protected},
		{"/api/index.php?cart", protected}, {"/x/?p=cart", "/x/?p=cart"}, {"/api/?p=carts", "/api/?p=carts"},
		// More values than the tails and directories are read for (64), or a route longer
		// than 1 KiB once cleaned, are taken as under them.
		{"/?" + strings.Repeat("a=1&", 65), protected}, {"/?" + strings.Repeat("a=1&", 60), "/?" + strings.Repeat("a=1&", 60)},
		{"/?r=/" + strings.Repeat("x/", 600), protected}, {"/?rest_route=/cart" + strings.Repeat("/", 2000), protected},
		// WooCommerce strips what PHP decoded once (sanitize_text_field: escapes left, tags,
		// a script or style element with its content).
		{"/?wc-ajax=check%2541out", protected}, {"/?wc-ajax=checkout%2561", protected}, {"/?wc-ajax=%2541checkout", protected},
		{"/?wc-ajax=check%3Cscript%3Ex%3C/script%3Eout", protected}, {"/?wc-ajax=checkout%3Cstyle%3Ex%3C/STYLE%3E", protected},
		{"/?q=" + strings.Repeat("%3Cscript", 500) + "x", "/?q=" + strings.Repeat("%3Cscript", 500) + "x"},
		// Script segments in all the query's values count together.
		{"/blog?" + strings.Repeat("v=/"+strings.Repeat(".php/.x/.x/", 2)+"&", 9), protected},
		// A fragment never leaves the browser, and servers end the query at "#".
		{"/?pagename=checkout#x", refused}, {"/products?q=1#top", refused}, {"/products#x", refused},
		// A protected file is protected by its name without extensions too (MultiViews,
		// try_files $uri $uri.php).
		{"/pay", protected}, {"/pay/", protected}, {"/PAY", protected}, {"/pay.php", protected},
		{"/index.php/pay", protected}, {"/pay.html", "/pay.html"},
		{"/?page=pay", "/?page=pay"}, // a route in the query is no file: no stems
		{"/payx", "/payx"}, {"/pa", "/pa"}, {"/pay-now", "/pay-now"}, {"/x/pay", "/x/pay"},
		// … and as those frameworks read values further: CodeIgniter cuts at a second "?",
		// WordPress decodes twice and strips tags, escapes and NUL, OpenCart keeps only letters,
		// digits, "_" and "/".
		{"/index.php?/checkout?a=1", protected}, {"/?wc-ajax=check%2500out", protected}, {"/?wc-ajax=checkout%2525", protected},
		{"/?wc-ajax=check%3Cb%3Eout", protected}, {"/?wc-ajax=checkout%00", protected}, {"/?wc-ajax=%00checkout", protected},
		{"/index.php?route=check-out/checkout", protected}, {"/index.php?route=che.ckout/checkout", protected},
		{"/index.php?route=%63heckout/check%out", protected}, {"/?pagename=%2563heckout", protected},
		{"/?pagename=checkout%00", protected}, {"/?API/CART", protected},
		// More front controllers' readings than any server routes through are protected (each
		// costs a scan: thousands of "/.php" took the gate seconds a request).
		{"/a.php/b.php/zz", "/a.php/b.php/zz"}, {"/" + strings.Repeat("a.php/", 17) + "zz", protected},
		// … under a bypass path too: every reading of one is a copy of the path (helper-79:
		// 2,307 script segments under /static/ took 69 ms a request to bypass).
		{"/static" + strings.Repeat("/static/a.php", 18), protected},
		{"/?x=" + strings.Repeat("/.php", 2000), protected}, {"/" + strings.Repeat(".php/", 2000) + "zz", protected},
		{"/static/app.js?v=checkout", "/static/app.js?v=checkout"}, // bypassed: its query is not read
		{"/?page=products", "/?page=products"}, {"/?q=checkouts", "/?q=checkouts"}, {"/?q=x/checkout", "/?q=x/checkout"},
		{"/?checkout-old", "/?checkout-old"},
		{"/?q=%zz", "/"}, {"/?&&;", "/"}, // a query that does not parse is dropped (httputil.ReverseProxy)
		// Passed, as the gate matched them.
		{"/checkouts", "/checkouts"}, {"/check", "/check"}, {"/checkout-old", "/checkout-old"},
		{"/x/checkout", "/x/checkout"}, {"/api/carts", "/api/carts"}, {"/static/app.js", "/static/app.js"},
		{"/static/./app.js", "/static/app.js"}, {"/a//b", "/a/b"}, {"/a/./b/../c/", "/a/c/"},
		{"/products/%C3%A9t%C3%A9", "/products/%C3%A9t%C3%A9"}, {"/static/x%3b", "/static/x;"},
		{"/%41bc", "/Abc"}, {"/", "/"},
		// Sub-delimiters reach the origin as the visitor wrote them, in a path the gate
		// cleaned too; what a path cannot carry stays encoded.
		{"/shop/item(1)", "/shop/item(1)"}, {"/a!b*c'd", "/a!b*c'd"}, {"/x/./y(1)", "/x/y(1)"},
		{"/x%28y%29", "/x%28y%29"}, {"/a%20b/./c", "/a%20b/c"}, {"/q/a+b,c=d&e$f@g:h", "/q/a+b,c=d&e$f@g:h"},
		{"/a/./%7Bb%7D%5E", "/a/%7Bb%7D%5E"}, {"/a/./%C3%A9", "/a/%C3%A9"},
	} {
		t.Run(tc.target, func(t *testing.T) {
			o := echoOrigin(t)
			u := newUnit(t, o.URL, 1, pathFile)
			resp, _ := send(t, u, "GET", "/checkout", nil) // takes the one slot: every protected request waits
			require.Equal(t, 200, resp.StatusCode)

			resp, body := rawDo(t, u.srv.URL, tc.target)
			switch tc.want {
			case protected:
				require.Equal(t, 503, resp.StatusCode, "proxy: %s", body)
				require.Contains(t, string(body), `"code":"waiting_room"`)
			case refused:
				require.Equal(t, 400, resp.StatusCode, "proxy: %s", body)
				require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
				require.Contains(t, string(body), `"code":"invalid_path"`)
			default:
				require.Equal(t, 200, resp.StatusCode, "proxy: %s", body)
				var e echoed
				require.NoError(t, json.Unmarshal(body, &e))
				require.Equal(t, tc.want, e.URI, "the path the origin received")
			}

			check := httptest.NewServer(http.HandlerFunc(u.g.Check))
			t.Cleanup(check.Close)
			for _, header := range []string{"X-Original-URI", "X-Forwarded-Uri"} {
				req, err := http.NewRequest("GET", check.URL+"/v1/gate/check", nil)
				require.NoError(t, err)
				req.Header.Set(header, tc.target)
				res, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				switch tc.want {
				case protected:
					require.Equal(t, 401, res.StatusCode, "%s: %s", header, body)
				case refused:
					require.Equal(t, 400, res.StatusCode, "%s: %s", header, body)
					require.Contains(t, string(body), `"code":"invalid_path"`)
					require.Equal(t, "invalid_path", res.Header.Get(gateway.HeaderProblem))
				default:
					require.Equal(t, 200, res.StatusCode, "%s: %s", header, body)
					require.Contains(t, string(body), `"decision":"pass"`)
				}
			}
		})
	}
}

// TestProtectedPrefixesInTheFile: a protected prefix the path rule could never match is an
// error of the gate file, and a trailing "/" protects the path without it.
func TestProtectedPrefixesInTheFile(t *testing.T) {
	for _, p := range []string{"/checkout;x", "/checkout.", "/check%2fout", `/a\b`, "/x/.../y",
		// Under the waiting room's own paths, which the gate serves itself.
		"/e/", "/e/spring", "/assets/x.js", "/v1/events/", "/v1/gate/check", "/.well-known/jwks.json"} {
		_, err := gateway.Parse("gate.yaml", []byte("sites:\n  - origin: http://o\n    protect:\n      - event: e\n        paths: ['"+p+"']\n"))
		require.Error(t, err, p)
		require.Contains(t, err.Error(), "sites[0].protect[0].paths", p)
	}
	// Beside them, not under them: the origin's.
	for _, p := range []string{"/e", "/events/", "/v1/event", "/v1/", "/assets"} {
		_, err := gateway.Parse("gate.yaml", []byte("sites:\n  - origin: http://o\n    protect:\n      - event: e\n        paths: ['"+p+"']\n"))
		require.NoError(t, err, p)
	}
	o := echoOrigin(t)
	u := newUnit(t, o.URL, 1, strings.Replace(pathFile, "[/checkout, /api/cart, /pay.php]", "[/checkout/]", 1))
	resp, _ := send(t, u, "GET", "/checkout/", nil) // takes the one slot
	require.Equal(t, 200, resp.StatusCode)
	for _, p := range []string{"/checkout", "/checkout.json", "/checkout/pay"} {
		resp, body := send(t, u, "GET", p, http.Header{"Accept": {"application/json"}})
		require.Equal(t, 503, resp.StatusCode, "%s: %s", p, body)
	}
}

// FuzzGatePath: no request-target both passes the gate unadmitted and reaches the origin as a
// path that an origin could route under a protected prefix (/checkout, /api/cart) by any of
// these rules: percent-decoding once or twice (or not at all), "\" read as "/" (IIS), ";…"
// parameters dropped (Tomcat, Spring), trailing dots and spaces dropped (IIS), a ".ext" or
// ":stream" suffix dropped (Rails' format, Spring's suffix patterns, NTFS streams), a decoded
// "?" or "#" ending the path again, dot segments resolved or not, case and Unicode
// compatibility forms ignored, what follows a PHP script segment routed as the path (a front
// controller's PATH_INFO, from the root or from the script's directory), an ASP.NET cookieless-session segment dropped, a path starting with
// "//" read as a host and its path (WHATWG's URL parser with a base: Node's new URL(req.url,
// base), skipping any slashes before the host). Through the reverse
// proxy (the path the origin received) and through the forward-auth check (the target as the
// proxy in front forwards it).
func FuzzGatePath(f *testing.F) {
	for _, s := range []string{
		"/checkout;jsessionid=x", "/checkout.json", "/checkout.", "/checkout%20", "/checkout%00", "/checkout%09",
		"/static/..%5ccheckout", `/static/..\checkout`, "/static/..;/checkout", "/checkout%252e", "/checkout%2f",
		"/CHECKOUT", "//checkout", "/checkout::$DATA", "/api./cart", "/api;x/cart", "/%EF%BD%83heckout",
		"/chec%E2%84%AAout", "/static/%2e%2e/checkout", "/checkout%3f", "/static/app.js", "/checkouts", "/a/../b",
		"/static/.%2e/checkout", "/static/x/..%2f..%2fcheckout", "/%C0%AEcheckout", "/checkout%C2%A0",
		"/foo/;/../checkout", "/static/;/../checkout", "/foo/.json/../checkout", "/foo/:x/../checkout", "/static/..:x/checkout",
		"/.00/CheCkout", "/index.php/checkout", "/public/INDEX.PHP/api/cart", "/static/index.php/checkout",
		"/(S(x))/checkout", "/(A(x)S(y))/api/cart", "/x(1)/./y", "//evil/checkout", "///x/api/cart", "//static/checkout",
		"/api/index.php/cart", "/API/x.cgi;a/Cart",
	} {
		f.Add(s)
	}
	o := echoOrigin(f)
	u := newUnit(f, o.URL, 1, pathFile)
	if resp, _ := rawDo(f, u.srv.URL, "/checkout"); resp.StatusCode != 200 {
		f.Fatalf("taking the slot: %d", resp.StatusCode)
	}
	f.Fuzz(func(t *testing.T, target string) { fuzzTarget(t, u, target, nil) })
}

// FuzzTwoEventsPath: on a site protecting two events, no request-target passes with one
// event's admission (spring-sale's, under /shopping-area, a longer prefix than the other's:
// the longest prefix a reading falls under is matched first) and reaches the origin as a path
// that an origin could route under the other's prefixes (/checkout, /api/cart), by the rules
// of FuzzGatePath: a path whose readings fall under both events' prefixes is refused.
func FuzzTwoEventsPath(f *testing.F) {
	for _, s := range []string{
		"/shopping-area/../checkout", "/shopping-area/%2e%2e/checkout", "/shopping-area;/../checkout", "/shopping-area/x/../../api/cart", "/shopping-area/./../CHECKOUT/x",
		"/shopping-area/index.php/checkout", "/?x=shopping-area&y=checkout", "/shopping-area?next=/checkout", "//shopping-area/checkout", "/shopping-area\\..\\checkout",
		"/shopping-area/..%2fcheckout", "/shopping-area/.%2e/checkout", "/shopping-area/pay", "/checkout", "/x/../shopping-area", "/shopping-area/(S(x))/../checkout",
		"/api/index.php/cart",
	} {
		f.Add(s)
	}
	file := strings.Replace(pathFile, "      - event: spring-sale\n        paths: [/checkout, /api/cart, /pay.php]",
		"      - event: other-sale\n        paths: [/checkout, /api/cart, /pay.php]\n      - event: spring-sale\n        paths: [/shopping-area]", 1)
	o := echoOrigin(f)
	u := newUnit(f, o.URL, 10, file)
	resp, _ := rawDo(f, u.srv.URL, "/shopping-area")
	admitted := gateCookie(resp)
	if resp.StatusCode != 200 || admitted == nil {
		f.Fatalf("an admission for spring-sale: %d", resp.StatusCode)
	}
	f.Fuzz(func(t *testing.T, target string) { fuzzTarget(t, u, target, admitted) })
}

// fuzzTarget sends target to the gate's listener and to its check, with the admission cookie c
// (nil: none), and fails when either passes it on while an origin could route it under
// /checkout or /api/cart (routedUnderProtected).
func fuzzTarget(t *testing.T, u *unit, target string, c *http.Cookie) {
	cookie := ""
	if c != nil {
		cookie = "Cookie: " + c.Name + "=" + c.Value + "\r\n"
	}
	// The proxy: the request as net/http's server reads it (a target it refuses never
	// reaches the gate).
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET " + target + " HTTP/1.1\r\nHost: shop.example\r\n" + cookie + "\r\n")))
	if err == nil {
		rec := httptest.NewRecorder()
		u.g.ServeHTTP(rec, req)
		if rec.Code == 200 && rec.Header().Get("Content-Type") == "application/json" {
			var e echoed
			if json.Unmarshal(rec.Body.Bytes(), &e) == nil && e.URI != "" {
				if r, ok := routedUnderProtected(e.URI); ok {
					t.Fatalf("%q passed (admission %v); the origin received %q, which an origin can read as %q", target, c != nil, e.URI, r)
				}
			}
		}
	}
	// The check: the proxy in front forwards the target as it came.
	if strings.ContainsAny(target, "\r\n\x00") {
		return
	}
	creq := httptest.NewRequest("GET", "/v1/gate/check", nil)
	creq.Header.Set("X-Original-URI", target)
	if c != nil {
		creq.AddCookie(c)
	}
	rec := httptest.NewRecorder()
	u.g.Check(rec, creq)
	if rec.Code == 200 && (strings.Contains(rec.Body.String(), `"pass"`) || strings.Contains(rec.Body.String(), `"admitted"`)) {
		if r, ok := routedUnderProtected(target); ok {
			t.Fatalf("the check passed %q (admission %v), which an origin can read as %q", target, c != nil, r)
		}
	}
}

// routedUnderProtected reports whether an origin could route a request-target (its path, as
// received) under /checkout or /api/cart, and the reading that does.
func routedUnderProtected(target string) (string, bool) {
	p := target
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if u, err := url.Parse(p); err == nil && u.Scheme != "" { // absolute-form
		p = u.EscapedPath()
	}
	decoded := []string{p}
	if d, err := url.PathUnescape(p); err == nil {
		decoded = append(decoded, d)
		if d2, err := url.PathUnescape(d); err == nil {
			decoded = append(decoded, d2)
		}
	}
	for _, d := range decoded {
		for mask := range 1 << 10 {
			r := d
			if mask&1 != 0 {
				r = strings.ReplaceAll(r, `\`, "/") // IIS
			}
			if mask&256 != 0 && strings.HasPrefix(r, "//") { // WHATWG: "//host/path"
				rest := strings.TrimLeft(r, "/")
				r = "/"
				if i := strings.IndexByte(rest, '/'); i >= 0 {
					r = rest[i:]
				}
			}
			if mask&2 != 0 {
				r = eachSegment(r, func(s string) string { s, _, _ = strings.Cut(s, ";"); return s }) // Tomcat
			}
			if mask&4 != 0 {
				r = eachSegment(r, func(s string) string { return strings.TrimRight(s, ". ") }) // IIS
			}
			if mask&8 != 0 {
				r = eachSegment(r, func(s string) string { s, _, _ = strings.Cut(s, "."); return s }) // Rails, Spring
			}
			if mask&16 != 0 {
				r = eachSegment(r, func(s string) string { s, _, _ = strings.Cut(s, ":"); return s }) // NTFS streams
			}
			if mask&32 != 0 {
				if i := strings.IndexAny(r, "?#"); i >= 0 {
					r = r[:i] // decoded, then split again by a proxy
				}
			}
			if mask&64 != 0 { // a front controller run as a script: what follows it is the route
				segs := strings.Split(r, "/")
				for i, s := range segs[:len(segs)-1] {
					if scriptSegment.MatchString(s) {
						r = "/" + strings.Join(segs[i+1:], "/")
						if mask&512 != 0 { // installed in its directory: the route is under it
							r = strings.Join(segs[:i], "/") + r
						}
						break
					}
				}
			}
			if mask&128 != 0 { // ASP.NET drops cookieless-session segments
				r = eachSegment(r, func(s string) string { return aspCookieless.ReplaceAllString(s, "") })
			}
			for _, x := range []string{r, path.Clean("/" + r)} {
				for _, y := range []string{x, strings.ToLower(strings.ToUpper(norm.NFKC.String(x)))} {
					if underProtected(y) {
						return y, true
					}
				}
			}
		}
	}
	return "", false
}

var (
	scriptSegment = regexp.MustCompile(`(?i)\.(php[3-8]?|phtml|phar|pht|phps|cgi|fcgi|wsgi|psgi|pl|pm|py|rb|sh|tcl|lua|exe|dll|asp|aspx|asmx|ashx|axd|svc|jsp|jspx|do|action|cfm|cfc)(\.|$)`)
	aspCookieless = regexp.MustCompile(`^\([A-Za-z]\(.*\)\)$`)
)

func eachSegment(p string, f func(string) string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = f(s)
	}
	return strings.Join(segs, "/")
}

// underProtected: the first non-empty segments are checkout, or api and cart, in any case.
func underProtected(p string) bool {
	var segs []string
	for _, s := range strings.Split(p, "/") {
		if s != "" {
			segs = append(segs, s)
		}
	}
	return len(segs) >= 1 && strings.EqualFold(segs[0], "checkout") ||
		len(segs) >= 2 && strings.EqualFold(segs[0], "api") && strings.EqualFold(segs[1], "cart")
}

// TestReadingsOfTwoEvents: on a site protecting two events, a path whose readings fall under
// different events' prefixes is refused (400 invalid_path), at the listener and at the check:
// "/checkout/../other" is under spring-sale's /checkout as sent and other-sale's /other
// resolved, and the origin serves /other, so spring-sale's admission must not pass it. The
// most specific prefix still wins when every reading agrees (/shop/vip/x is other-sale's).
// "/shop/index.php/vip" is /shop's as sent and /shop/vip's as a front controller in /shop/
// routes it (helper-76).
func TestReadingsOfTwoEvents(t *testing.T) {
	u, admitted, get := twoEvents(t, "/checkout, /shop", "/other, /shop/vip")
	check := checkServer(t, u)
	for _, target := range []string{
		"/checkout/../other", "/checkout/%2e%2e/other", "/checkout;/../other", "/checkout/x/../../other",
		"/checkout/../OTHER/admin", "/checkout/./../other", "/shop/vip/../x", "/shop/../shop/vip",
		"/?x=checkout&pagename=other", "/index.php?page=checkout&next=shop/vip",
		// A path of one event with a query naming the other's (WordPress's pagename overrides
		// its path).
		"/checkout?pagename=other", "/shop/?pagename=shop/vip", "/shop/x?p=/shop/vip",
		// A front controller in /shop/ routes its PATH_INFO under /shop/.
		"/shop/index.php/vip", "/shop/app.cgi;x/VIP/y",
	} {
		resp, body := get(target)
		require.Equal(t, 400, resp.StatusCode, "%s: %s", target, body)
		require.Contains(t, string(body), `"code":"invalid_path"`, target)
		resp, m := askCheck(t, check, http.Header{"X-Original-Uri": {target}}, admitted)
		require.Equal(t, 400, resp.StatusCode, "check %s: %v", target, m)
		require.Equal(t, "invalid_path", resp.Header.Get("X-Waitroom-Problem"), target)
	}
	// Readings that agree: the admission passes its own event's paths; another event's path
	// waits in that event's line (here: a join, its event not set up in this store), not 400.
	for target, want := range map[string]int{"/checkout/pay": 200, "/checkout/x/../pay": 200, "/shop/x": 200, "/x/../checkout": 200} {
		resp, body := get(target)
		require.Equal(t, want, resp.StatusCode, "%s: %s", target, body)
	}
	for _, target := range []string{"/other", "/shop/vip/x", "/?pagename=other"} {
		resp, body := get(target)
		require.NotEqual(t, 400, resp.StatusCode, "%s: %s", target, body)
		require.NotEqual(t, 200, resp.StatusCode, "%s: another event's path passed: %s", target, body)
	}
}

// TestOverlappingPrefixesOfTwoEvents: on a site of two events, a reading under prefixes of both
// that are not nested segment by segment is refused (400 invalid_path): /pay.php (which also
// protects /pay/…) beside another event's /pay/ (helper-76: /pay/x passed with the first
// event's admission, its prefix being the longer string). The deepest prefix, not the longest
// string, is a reading's own: a fullwidth /ｓｈｏｐ/x is longer than /shop/x/y, and
// /shop/x/y/z is the second event's.
func TestOverlappingPrefixesOfTwoEvents(t *testing.T) {
	_, _, get := twoEvents(t, "/checkout, /pay.php, /ｓｈｏｐ/x", "/pay/, /shop/x/y")
	for _, target := range []string{"/pay/x", "/pay/", "/pay"} {
		resp, body := get(target)
		require.Equal(t, 400, resp.StatusCode, "%s: %s", target, body)
		require.Contains(t, string(body), `"code":"invalid_path"`, target)
	}
	resp, body := get("/shop/x/y/z")
	require.NotEqual(t, 200, resp.StatusCode, "another event's deeper path passed: %s", body)
	require.NotEqual(t, 400, resp.StatusCode, "%s", body)
	resp, body = get("/shop/x/z")
	require.Equal(t, 200, resp.StatusCode, "the event's own path: %s", body)
}

// twoEvents is a gate site protecting spring-sale's paths and other-sale's (YAML flow lists'
// items), with a visitor admitted to spring-sale (by GET /checkout, which spring-sale's must
// hold); get sends a request-target as written, with that admission's cookie.
func twoEvents(t *testing.T, spring, other string) (u *unit, admitted *http.Cookie, get func(target string) (*http.Response, []byte)) {
	t.Helper()
	file := strings.Replace(pathFile, "paths: [/checkout, /api/cart, /pay.php]",
		"paths: ["+spring+"]\n      - event: other-sale\n        paths: ["+other+"]", 1)
	u = newUnit(t, echoOrigin(t).URL, 10, file)
	resp, _ := send(t, u, "GET", "/checkout", nil)
	require.Equal(t, 200, resp.StatusCode)
	admitted = gateCookie(resp)
	require.NotNil(t, admitted)
	cookie := "Cookie: " + admitted.Name + "=" + admitted.Value + "\r\n"
	addr := strings.TrimPrefix(u.srv.URL, "http://")
	return u, admitted, func(target string) (*http.Response, []byte) {
		return rawHead(t, addr, "GET "+target+" HTTP/1.1\r\nHost: shop.example\r\n"+cookie)
	}
}
