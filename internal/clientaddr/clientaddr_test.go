package clientaddr

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var testTrusted = func() []netip.Prefix {
	p, err := ParseCIDRs("10.0.0.0/8, 2001:db8:ffff::/48, 192.0.2.7")
	if err != nil {
		panic(err)
	}
	return p
}()

func request(remote, xff, fwd string) *http.Request {
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = remote
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	if fwd != "" {
		req.Header.Set("Forwarded", fwd)
	}
	return req
}

func TestTrustRule(t *testing.T) {
	xff, fwd := New(testTrusted, XForwardedFor), New(testTrusted, Forwarded)
	for _, tc := range []struct {
		name          string
		r             *Resolver
		remote        string
		xff, fwd      string
		want, wantChn string
	}{
		{"untrusted peer, headers ignored", xff, "203.0.113.5:1234", "198.51.100.1", "for=198.51.100.2", "203.0.113.5", "203.0.113.5"},
		{"trusted peer, xff", xff, "10.1.2.3:80", "198.51.100.1", "", "198.51.100.1", "198.51.100.1 10.1.2.3"},
		{"client spoofs the left of xff", xff, "10.1.2.3:80", "6.6.6.6, 198.51.100.1", "", "198.51.100.1", "198.51.100.1 10.1.2.3"},
		{"trusted hops skipped", xff, "10.1.2.3:80", "198.51.100.1, 10.9.9.9, 192.0.2.7", "", "198.51.100.1",
			"198.51.100.1 10.9.9.9 192.0.2.7 10.1.2.3"},
		{"several header lines", xff, "10.1.2.3:80", "6.6.6.6", "", "6.6.6.6", "6.6.6.6 10.1.2.3"},
		{"all trusted: left-most", xff, "10.1.2.3:80", "10.0.0.1, 10.0.0.2", "", "10.0.0.1", "10.0.0.1 10.0.0.2 10.1.2.3"},
		{"garbage alone: peer", xff, "10.1.2.3:80", "not-an-ip", "", "10.1.2.3", "10.1.2.3"},
		{"garbage left of a trusted hop: that hop", xff, "10.1.2.3:80", "not-an-ip, 10.0.0.9", "", "10.0.0.9", "10.0.0.9 10.1.2.3"},
		{"garbage left of the client: ignored", xff, "10.1.2.3:80", "not-an-ip, 198.51.100.1", "", "198.51.100.1", "198.51.100.1 10.1.2.3"},
		{"empty entries skipped", xff, "10.1.2.3:80", "198.51.100.1, , ", "", "198.51.100.1", "198.51.100.1 10.1.2.3"},
		{"ports dropped", xff, "10.1.2.3:80", "198.51.100.1:4711", "", "198.51.100.1", "198.51.100.1 10.1.2.3"},
		{"bracketed v6", xff, "10.1.2.3:80", "[2001:db8:1:2::9]", "", "2001:db8:1:2::9", "2001:db8:1:2::9 10.1.2.3"},
		{"xff resolver ignores Forwarded", xff, "10.1.2.3:80", "198.51.100.1", "for=198.51.100.2", "198.51.100.1", "198.51.100.1 10.1.2.3"},
		{"xff resolver, Forwarded alone: peer", xff, "10.1.2.3:80", "", "for=198.51.100.2", "10.1.2.3", "10.1.2.3"},
		{"forwarded resolver ignores xff", fwd, "10.1.2.3:80", "198.51.100.1", `for="[2001:db8:1:2::9]:4711";proto=https`, "2001:db8:1:2::9",
			"2001:db8:1:2::9 10.1.2.3"},
		{"forwarded resolver, xff alone: peer", fwd, "10.1.2.3:80", "198.51.100.1", "", "10.1.2.3", "10.1.2.3"},
		{"forwarded unknown: peer", fwd, "10.1.2.3:80", "", "for=unknown", "10.1.2.3", "10.1.2.3"},
		{"forwarded obfuscated: peer", fwd, "10.1.2.3:80", "", "for=_hidden", "10.1.2.3", "10.1.2.3"},
		{"forwarded element without for", fwd, "10.1.2.3:80", "", "for=198.51.100.9, proto=https", "10.1.2.3", "10.1.2.3"},
		{"forwarded chain", fwd, "10.1.2.3:80", "", "for=198.51.100.9, for=10.0.0.5", "198.51.100.9", "198.51.100.9 10.0.0.5 10.1.2.3"},
		{"forwarded case-insensitive name", fwd, "10.1.2.3:80", "", "For=198.51.100.9;by=10.0.0.1", "198.51.100.9", "198.51.100.9 10.1.2.3"},
		{"forwarded for twice: malformed", fwd, "10.1.2.3:80", "", "for=198.51.100.9;for=198.51.100.8", "10.1.2.3", "10.1.2.3"},
		{"v6 trusted proxy", xff, "[2001:db8:ffff:1::1]:80", "198.51.100.3", "", "198.51.100.3", "198.51.100.3 2001:db8:ffff:1::1"},
		{"mapped v4 peer", xff, "[::ffff:203.0.113.5]:1", "", "", "203.0.113.5", "203.0.113.5"},
		{"mapped v4 entry", xff, "10.1.2.3:80", "::ffff:198.51.100.1", "", "198.51.100.1", "198.51.100.1 10.1.2.3"},
		{"no headers from trusted peer", xff, "10.1.2.3:80", "", "", "10.1.2.3", "10.1.2.3"},
		{"nil resolver trusts nobody", nil, "10.1.2.3:80", "198.51.100.1", "", "10.1.2.3", "10.1.2.3"},
		{"unreadable peer", xff, "@", "198.51.100.1", "", "invalid IP", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := request(tc.remote, tc.xff, tc.fwd)
			if tc.name == "several header lines" {
				req.Header.Add("X-Forwarded-For", "") // an empty second line changes nothing
			}
			require.Equal(t, tc.want, tc.r.Addr(req).String())
			var chain []string
			for _, a := range tc.r.Chain(req) {
				chain = append(chain, a.String())
			}
			require.Equal(t, tc.wantChn, strings.Join(chain, " "))
		})
	}
}

func TestPeerTrusted(t *testing.T) {
	r := New(testTrusted, XForwardedFor)
	require.True(t, r.PeerTrusted(request("10.1.2.3:80", "", "")))
	require.False(t, r.PeerTrusted(request("203.0.113.5:80", "", "")))
	require.False(t, r.PeerTrusted(request("@", "", "")))
	var none *Resolver
	require.False(t, none.PeerTrusted(request("10.1.2.3:80", "", "")))
}

// TestUntrustedForwarding: a request that carries a forwarding header from a peer the resolver
// does not trust is reported (a load balancer missing from --trusted-proxies); one from a
// trusted proxy, or without the header, is not.
func TestUntrustedForwarding(t *testing.T) {
	r := New(testTrusted, XForwardedFor)
	var seen []string
	r.OnUntrustedForwarding(func(peer netip.Addr, header string) { seen = append(seen, peer.String()+" "+header) })
	r.Notice(request("203.0.113.5:1", "198.51.100.1", ""))
	r.Notice(request("203.0.113.6:1", "", "for=198.51.100.1"))
	r.Notice(request("203.0.113.7:1", "", ""))
	r.Notice(request("10.1.2.3:80", "198.51.100.1", ""))
	require.Equal(t, []string{"203.0.113.5 X-Forwarded-For", "203.0.113.6 Forwarded"}, seen)
}

func TestParseHeader(t *testing.T) {
	for in, want := range map[string]Header{"": XForwardedFor, "x-forwarded-for": XForwardedFor, "FORWARDED": Forwarded} {
		h, err := ParseHeader(in)
		require.NoError(t, err)
		require.Equal(t, want, h)
	}
	_, err := ParseHeader("X-Real-IP")
	require.ErrorContains(t, err, "X-Real-IP")
	require.Equal(t, "Forwarded", Forwarded.String())
	require.Equal(t, "X-Forwarded-For", XForwardedFor.String())
}

func TestKeyOfGroupsIPv6By64(t *testing.T) {
	req := httptest.NewRequest("GET", "/", nil)
	var r *Resolver // nil trusts nobody
	req.RemoteAddr = "[2001:db8:1:2:aaaa::1]:5"
	k1 := r.Key(req)
	req.RemoteAddr = "[2001:db8:1:2:bbbb::7%eth0]:5"
	k2 := r.Key(req)
	req.RemoteAddr = "[2001:db8:1:3::1]:5"
	k3 := r.Key(req)
	require.Equal(t, "2001:db8:1:2::/64", k1)
	require.Equal(t, k1, k2)
	require.NotEqual(t, k1, k3)
	req.RemoteAddr = "198.51.100.4:9"
	require.Equal(t, "198.51.100.4", r.Key(req))
	req.RemoteAddr = "@"
	require.Equal(t, "", r.Key(req))
}

func TestParseCIDRs(t *testing.T) {
	p, err := ParseCIDRs("")
	require.NoError(t, err)
	require.Empty(t, p)
	p, err = ParseCIDRs("10.1.2.3/8,::1,::ffff:192.0.2.0/120")
	require.NoError(t, err)
	require.Equal(t, "10.0.0.0/8", p[0].String())
	require.Equal(t, "::1/128", p[1].String())
	require.Equal(t, "192.0.2.0/24", p[2].String())
	_, err = ParseCIDRs("10.0.0.0/8,bogus")
	require.ErrorContains(t, err, "bogus")
}

// FuzzTrustRule checks the rule's promises on any header: it never panics; an untrusted peer
// is the client whatever the headers say; the chain runs from the client to the peer and every
// hop right of the client is a trusted proxy; the client is the peer or an address of the
// header; and — the point of the rule — what a client writes to the left of what the proxies
// wrote never changes who it is found to be, once it is found to be someone untrusted.
func FuzzTrustRule(f *testing.F) {
	for _, s := range []struct{ remote, header, prefix string }{
		{"10.1.2.3:80", "198.51.100.1", "6.6.6.6"},
		{"10.1.2.3:80", "198.51.100.1, 10.9.9.9", "garbage"},
		{"10.1.2.3:80", "for=198.51.100.9, for=10.0.0.5", `for="[::1]"`},
		{"203.0.113.5:1", "1.2.3.4", ""},
		{"[2001:db8:ffff::1]:80", "[2001:db8::1]:4711, ,", "for=unknown"},
	} {
		f.Add(s.remote, s.header, s.prefix, false)
		f.Add(s.remote, s.header, s.prefix, true)
	}
	f.Fuzz(func(t *testing.T, remoteAddr, header, prefix string, fwd bool) {
		h := XForwardedFor
		name := "X-Forwarded-For"
		if fwd {
			h, name = Forwarded, "Forwarded"
		}
		r := New(testTrusted, h)
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = remoteAddr
		req.Header[name] = []string{header}
		client := r.Addr(req)
		chain := r.Chain(req)
		peer := Peer(req)
		if !peer.IsValid() {
			if client.IsValid() || chain != nil {
				t.Fatalf("unreadable peer %q: client %v chain %v", remoteAddr, client, chain)
			}
			return
		}
		if len(chain) == 0 || chain[0] != client || chain[len(chain)-1] != peer {
			t.Fatalf("chain %v does not run from the client %v to the peer %v", chain, client, peer)
		}
		for _, hop := range chain[1:] {
			if !r.Trusted(hop) {
				t.Fatalf("chain %v: hop %v right of the client is not trusted", chain, hop)
			}
		}
		if !r.Trusted(peer) && client != peer {
			t.Fatalf("untrusted peer %v, client %v", peer, client)
		}
		if client != peer && !inHeader(client, header, fwd) {
			t.Fatalf("client %v is neither the peer nor in the header %q", client, header)
		}
		if r.Trusted(client) {
			return // the walk ran out or stopped at garbage: a prefix may extend it
		}
		req.Header[name] = []string{prefix, header}
		if got := r.Addr(req); got != client {
			t.Fatalf("prefix %q written by the client moved it from %v to %v (header %q)", prefix, client, got, header)
		}
		if prefix != "" {
			req.Header[name] = []string{prefix + "," + header}
			if got := r.Addr(req); got != client {
				t.Fatalf("prefix %q, in the same line, moved the client from %v to %v (header %q)", prefix, client, got, header)
			}
		}
	})
}

// inHeader reports whether a is one of the addresses of a header line.
func inHeader(a netip.Addr, header string, fwd bool) bool {
	for _, e := range strings.Split(header, ",") {
		parse := xffEntry
		if fwd {
			parse = forwardedEntry
		}
		if b, ok := parse(strings.TrimSpace(e)); ok && b == a {
			return true
		}
	}
	return false
}

// TestHTTPS: a request is HTTPS over TLS, or by a trusted proxy's X-Forwarded-Proto of
// "https" (any case), a proxy chain's list by its first value (the client's hop); a
// stranger's header is not believed.
func TestHTTPS(t *testing.T) {
	r := New([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, XForwardedFor)
	for _, c := range []struct {
		peer, proto string
		tls, want   bool
	}{
		{"10.1.1.1:5", "https", false, true},
		{"10.1.1.1:5", "HTTPS", false, true},
		{"10.1.1.1:5", "http", false, false},
		{"10.1.1.1:5", "https, http", false, true},
		{"10.1.1.1:5", " HTTPS ,http", false, true},
		{"10.1.1.1:5", "http, https", false, false},
		{"10.1.1.1:5", "httpsx", false, false},
		{"203.0.113.5:5", "https, https", false, false},
		{"203.0.113.5:5", "https", false, false},
		{"203.0.113.5:5", "", true, true},
		{"@", "https", false, false},
	} {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = c.peer
		if c.proto != "" {
			req.Header.Set("X-Forwarded-Proto", c.proto)
		}
		if c.tls {
			req.TLS = &tls.ConnectionState{}
		}
		require.Equal(t, c.want, r.HTTPS(req), "%+v", c)
	}
}
