package autoadmit_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/autoadmit"
)

// TestHealthURLs: a health URL is allowed under a prefix of the same scheme and host (port
// included) on a path boundary; nothing is allowed by the empty list; a prefix that is not a
// plain http(s) URL is refused.
func TestHealthURLs(t *testing.T) {
	h, err := autoadmit.ParseHealthURLs(" https://shop.example/health , http://10.0.0.5:8080/, https://api.example")
	require.NoError(t, err)
	require.Equal(t, []string{"https://shop.example/health", "http://10.0.0.5:8080/", "https://api.example"}, h.Prefixes())
	for raw, want := range map[string]bool{
		"https://shop.example/health":                 true,
		"https://SHOP.example/health/x?token=1":       true,
		"https://shop.example/healthz":                false,
		"https://shop.example/":                       false,
		"http://shop.example/health":                  false,
		"https://shop.example:444/health":             false,
		"https://shop.example.evil.test/health":       false,
		"https://user@shop.example/health":            false,
		"http://10.0.0.5:8080/anything":               true,
		"http://10.0.0.5/anything":                    false,
		"http://10.0.0.6:8080/":                       false,
		"https://api.example/p95":                     true,
		"http://169.254.169.254/latest":               false,
		"::not a url":                                 false,
		"https://shop.example/health/../admin":        false,
		"https://shop.example/health/%2e%2e/admin":    false,
		"https://shop.example/health/%2E%2E/%2E%2E/x": false,
		"https://shop.example/health/..%2fadmin":      false,
		"https://shop.example/health/.":               false,
		"https://shop.example/health/a%5cb":           false,
		"https://shop.example/health\\..\\admin":      false,
		"https://shop.example/health/..":              false,
		"https://shop.example/health/x..y/.z":         true,
		"https://shop.example:/health":                false,
		"http://10.0.0.5:08080/":                      false,
	} {
		require.Equal(t, want, h.Allows(raw), raw)
	}
	none, err := autoadmit.ParseHealthURLs("")
	require.NoError(t, err)
	require.False(t, none.Allows("https://shop.example/health"))
	require.False(t, autoadmit.HealthURLs{}.Allows("https://shop.example/health"))
	for _, bad := range []string{"ftp://x/", "/health", "https://shop.example/health?x=1", "https://u:p@shop.example/", "shop.example/health", "https://",
		"http://h:99999/", "http://h:/", "http://h:0/", "http://h/a/../b", "http://h/a/%2e/b"} {
		_, err := autoadmit.ParseHealthURLs(bad)
		require.Error(t, err, bad)
	}
}
