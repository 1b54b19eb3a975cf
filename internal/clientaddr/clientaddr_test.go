package clientaddr

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAddr(t *testing.T) {
	trusted, err := ParseCIDRs("10.0.0.0/8, 2001:db8:ffff::/48, 192.0.2.7")
	require.NoError(t, err)
	r := New(trusted)
	for _, tc := range []struct {
		name, remote, xff, fwd, want string
	}{
		{"untrusted peer, headers ignored", "203.0.113.5:1234", "198.51.100.1", "for=198.51.100.2", "203.0.113.5"},
		{"trusted peer, xff", "10.1.2.3:80", "198.51.100.1", "", "198.51.100.1"},
		{"client spoofs the left of xff", "10.1.2.3:80", "6.6.6.6, 198.51.100.1", "", "198.51.100.1"},
		{"trusted hops skipped", "10.1.2.3:80", "198.51.100.1, 10.9.9.9, 192.0.2.7", "", "198.51.100.1"},
		{"all trusted: left-most", "10.1.2.3:80", "10.0.0.1, 10.0.0.2", "", "10.0.0.1"},
		{"garbage xff: peer", "10.1.2.3:80", "not-an-ip", "", "10.1.2.3"},
		{"forwarded wins over xff", "10.1.2.3:80", "198.51.100.1", `for="[2001:db8:1:2::9]:4711";proto=https`, "2001:db8:1:2::9"},
		{"forwarded unknown: peer", "10.1.2.3:80", "", "for=unknown", "10.1.2.3"},
		{"forwarded chain", "10.1.2.3:80", "", "for=198.51.100.9, for=10.0.0.5", "198.51.100.9"},
		{"v6 trusted proxy", "[2001:db8:ffff:1::1]:80", "198.51.100.3", "", "198.51.100.3"},
		{"mapped v4 peer", "[::ffff:203.0.113.5]:1", "", "", "203.0.113.5"},
		{"no headers from trusted peer", "10.1.2.3:80", "", "", "10.1.2.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", "/", nil)
			req.RemoteAddr = tc.remote
			if tc.xff != "" {
				req.Header.Set("X-Forwarded-For", tc.xff)
			}
			if tc.fwd != "" {
				req.Header.Set("Forwarded", tc.fwd)
			}
			require.Equal(t, tc.want, r.Addr(req).String())
		})
	}
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
	p, err = ParseCIDRs("10.1.2.3/8,::1")
	require.NoError(t, err)
	require.Equal(t, "10.0.0.0/8", p[0].String())
	require.Equal(t, "::1/128", p[1].String())
	_, err = ParseCIDRs("10.0.0.0/8,bogus")
	require.ErrorContains(t, err, "bogus")
}
