package origin

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAllowed(t *testing.T) {
	same, err := Parse("")
	require.NoError(t, err)
	list, err := Parse("https://shop.example, http://localhost:8080")
	require.NoError(t, err)
	anyOrigin, err := Parse("*")
	require.NoError(t, err)
	for _, c := range []struct {
		p      *Policy
		origin string
		want   bool
	}{
		{same, "", true},
		{same, "https://wait.example", true},
		{same, "https://evil.example", false},
		{same, "null", false},
		{nil, "https://wait.example", true},
		{list, "https://shop.example", true},
		{list, "HTTPS://SHOP.EXAMPLE", true},
		{list, "http://localhost:8080", true},
		{list, "https://wait.example", false}, // a list replaces the same-origin rule
		{list, "http://shop.example", false},
		{list, "", true},
		{anyOrigin, "https://anything.example", true},
	} {
		r := httptest.NewRequest("POST", "http://wait.example/v1/events/e/tickets", nil)
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		require.Equal(t, c.want, c.p.Allowed(r), "origin %q", c.origin)
	}
	r := httptest.NewRequest("POST", "http://wait.example/", nil)
	r.Header.Add("Origin", "https://wait.example")
	r.Header.Add("Origin", "https://wait.example")
	require.False(t, same.Allowed(r), "two Origin headers")
}

func TestParseErrors(t *testing.T) {
	for _, bad := range []string{"shop.example", "ftp://x", "https://x/path", "https://u@x"} {
		_, err := Parse(bad)
		require.Error(t, err, bad)
	}
}

// TestOnRefused: the hook hears each request Check refuses for its origin, with the Host it
// was compared against; nothing of the requests allowed, nor of Allowed's (a decision about
// CORS headers, not a refusal).
func TestOnRefused(t *testing.T) {
	same, err := Parse("")
	require.NoError(t, err)
	var heard [][2]string
	same.OnRefused(func(origin, host string) { heard = append(heard, [2]string{origin, host}) })
	for _, o := range []string{"https://wait.example", "", "http://wait.example:8080", "HTTPS://Evil.example/"} {
		r := httptest.NewRequest("POST", "http://wait.example/v1/events/e/tickets", nil)
		if o != "" {
			r.Header.Set("Origin", o)
		}
		same.Allowed(r)
		same.Check(r)
	}
	require.Equal(t, [][2]string{{"http://wait.example:8080", "wait.example"}, {"https://evil.example", "wait.example"}}, heard)
}

// TestMayJoin: a request to the gate takes a place unless a browser says it comes from
// another site's page without being a top-level navigation, or its Origin is refused.
func TestMayJoin(t *testing.T) {
	same, err := Parse("")
	require.NoError(t, err)
	list, err := Parse("https://shop.example")
	require.NoError(t, err)
	var refused []string
	same.OnRefused(func(o, host string) { refused = append(refused, o+" at "+host) })
	type hdr = map[string][]string
	nav := hdr{"Sec-Fetch-Site": {"cross-site"}, "Sec-Fetch-Mode": {"navigate"}, "Sec-Fetch-Dest": {"document"}}
	for _, c := range []struct {
		name string
		p    *Policy
		h    hdr
		want bool
	}{
		{"no browser headers (curl, an old browser)", same, hdr{}, true},
		{"typed or bookmarked", same, hdr{"Sec-Fetch-Site": {"none"}, "Sec-Fetch-Mode": {"navigate"}, "Sec-Fetch-Dest": {"document"}}, true},
		{"the site's own page", same, hdr{"Sec-Fetch-Site": {"same-origin"}, "Sec-Fetch-Mode": {"no-cors"}, "Sec-Fetch-Dest": {"image"}}, true},
		{"a sibling site", same, hdr{"Sec-Fetch-Site": {"same-site"}, "Sec-Fetch-Mode": {"navigate"}, "Sec-Fetch-Dest": {"document"}}, true},
		{"a link from another site", same, nav, true},
		{"an image on another site", same, hdr{"Sec-Fetch-Site": {"cross-site"}, "Sec-Fetch-Mode": {"no-cors"}, "Sec-Fetch-Dest": {"image"}}, false},
		{"a script on another site", same, hdr{"Sec-Fetch-Site": {"Cross-Site"}, "Sec-Fetch-Mode": {"no-cors"}, "Sec-Fetch-Dest": {"script"}}, false},
		{"a frame on another site", same, hdr{"Sec-Fetch-Site": {"cross-site"}, "Sec-Fetch-Mode": {"navigate"}, "Sec-Fetch-Dest": {"iframe"}}, false},
		{"cross-site without its mode", same, hdr{"Sec-Fetch-Site": {"cross-site"}}, false},
		{"Sec-Fetch-Site twice", same, hdr{"Sec-Fetch-Site": {"same-origin", "cross-site"}}, false},
		{"navigate twice", same, hdr{"Sec-Fetch-Site": {"cross-site"}, "Sec-Fetch-Mode": {"navigate", "navigate"}, "Sec-Fetch-Dest": {"document"}}, false},
		{"another site's form POST", same, hdr{"Origin": {"https://evil.example"}, "Sec-Fetch-Site": {"cross-site"}, "Sec-Fetch-Mode": {"navigate"}, "Sec-Fetch-Dest": {"document"}}, false},
		{"an opaque origin's POST", same, hdr{"Origin": {"null"}}, false},
		{"the site's own POST", same, hdr{"Origin": {"https://wait.example"}, "Sec-Fetch-Site": {"same-origin"}}, true},
		{"an allowed site's fetch", list, hdr{"Origin": {"https://shop.example"}, "Sec-Fetch-Site": {"cross-site"}, "Sec-Fetch-Mode": {"cors"}, "Sec-Fetch-Dest": {"empty"}}, true},
		{"an allowed site's image", list, hdr{"Sec-Fetch-Site": {"cross-site"}, "Sec-Fetch-Mode": {"no-cors"}, "Sec-Fetch-Dest": {"image"}}, false},
		{"another site's speculative prefetch", same, hdr{"Sec-Fetch-Site": {"cross-site"}, "Sec-Fetch-Mode": {"navigate"}, "Sec-Fetch-Dest": {"document"}, "Sec-Purpose": {"prefetch"}}, false},
		{"another site's prerender", same, hdr{"Sec-Fetch-Site": {"cross-site"}, "Sec-Fetch-Mode": {"navigate"}, "Sec-Fetch-Dest": {"document"}, "Sec-Purpose": {"prefetch;prerender"}}, false},
		{"a legacy prefetch", same, hdr{"Sec-Fetch-Site": {"cross-site"}, "Sec-Fetch-Mode": {"navigate"}, "Sec-Fetch-Dest": {"document"}, "Purpose": {"prefetch"}}, false},
		{"the site's own form, no-referrer", same, hdr{"Origin": {"null"}, "Sec-Fetch-Site": {"same-origin"}, "Sec-Fetch-Mode": {"navigate"}}, true},
		{"a sibling host's script", same, hdr{"Origin": {"https://www.wait.example"}, "Sec-Fetch-Site": {"same-site"}, "Sec-Fetch-Mode": {"cors"}}, true},
		{"the same host at another port", same, hdr{"Origin": {"https://wait.example:443"}, "Sec-Fetch-Site": {"same-origin"}}, true},
		{"no Fetch Metadata, another site's Origin", same, hdr{"Origin": {"https://evil.example"}}, false},
	} {
		require.Equal(t, c.want, c.p.MayJoin(c.h, "wait.example"), c.name)
	}
	require.Equal(t, []string{"https://evil.example at wait.example", "null at wait.example", "https://evil.example at wait.example"}, refused)
}

// TestFromSite: a request the site's own page or the visitor made (or one without Fetch
// Metadata) is from the site; one another site's page made, or one saying two things, is not.
func TestFromSite(t *testing.T) {
	for _, c := range []struct {
		h    http.Header
		want bool
	}{
		{http.Header{}, true},
		{http.Header{"Sec-Fetch-Site": {"same-origin"}}, true},
		{http.Header{"Sec-Fetch-Site": {"same-site"}}, true},
		{http.Header{"Sec-Fetch-Site": {"None"}}, true},
		{http.Header{"Sec-Fetch-Site": {"cross-site"}, "Sec-Fetch-Mode": {"navigate"}, "Sec-Fetch-Dest": {"document"}}, false},
		{http.Header{"Sec-Fetch-Site": {"same-origin", "cross-site"}}, false},
		{http.Header{"Sec-Fetch-Site": {"something-else"}}, false},
	} {
		require.Equal(t, c.want, FromSite(c.h), "%v", c.h)
	}
}
