package origin

import (
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
