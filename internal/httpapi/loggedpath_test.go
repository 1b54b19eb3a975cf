package httpapi

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLoggedPath: a ticket id in a path is cut to 6 characters wherever the path leads, and
// nothing else is changed.
func TestLoggedPath(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/events/e/tickets/ABCDEFGHIJ":           "/v1/events/e/tickets/ABCDEF…",
		"/v1/events/e/tickets/ABCDEFGHIJ/":          "/v1/events/e/tickets/ABCDEF…/",
		"/v1/events/e/tickets/ABCDEFGHIJ/ws":        "/v1/events/e/tickets/ABCDEF…/ws",
		"/v1/events/tickets/tickets/ABCDEFGHIJ/x/y": "/v1/events/tickets/tickets/ABCDEF…/x/y",
		"/v1/events/e/tickets/ABC":                  "/v1/events/e/tickets/ABC",
		"/v1/events/e/tickets":                      "/v1/events/e/tickets",
		"/v1/events/e/holds/ABCDEFGHIJ":             "/v1/events/e/holds/ABCDEFGHIJ",
		"/e/ABCDEFGHIJ":                             "/e/ABCDEFGHIJ",
	} {
		require.Equal(t, want, loggedPath(httptest.NewRequest("GET", path, nil)), path)
	}
}
