package app_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// callFrom is callH made with hc (clientFrom: a source address of its own), without the admin
// key.
func callFrom(t *testing.T, hc *http.Client, base, method, path, body string, headers ...string) resp {
	t.Helper()
	return callVia(t, hc, base, method, path, "", body, headers...)
}

// TestTicketsPerClientInThePreQueue (issue 20): one address gets at most tickets_per_client
// tickets of a pre-queue, on both instances together, then 429 rate_limited with Retry-After
// until the opening; its idempotent retry still gets its ticket, another address is not
// touched, and the field is read, shown and checked like the other limits. On both backends.
func TestTicketsPerClientInThePreQueue(t *testing.T) {
	onBothBackends(t, func(t *testing.T, x, y string) {
		opens := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		r := putEvent(t, x, "early", `{"max_active":10,"opens_at":"`+opens+`","limits":{"tickets_per_client":3}}`)
		require.Equal(t, 201, r.code, r.raw)
		lim, _ := r.body["limits"].(map[string]any)
		require.EqualValues(t, 3, lim["tickets_per_client"])
		require.EqualValues(t, 50, lim["joins_per_client"], "the default")
		bad := putEvent(t, x, "early", `{"max_active":10,"limits":{"tickets_per_client":0}}`)
		require.Equal(t, 422, bad.code, bad.raw)
		require.Contains(t, str(bad, "detail"), "tickets_per_client")
		g := call(t, y, "GET", "/v1/events/early", "", "") // y knows the event
		require.EqualValues(t, 3, g.body["limits"].(map[string]any)["tickets_per_client"])

		bot, person := clientFrom(t, "127.0.0.41"), clientFrom(t, "127.0.0.42")
		var first resp
		for i, base := range []string{x, y, x} {
			j := callFrom(t, bot, base, "POST", "/v1/events/early/tickets", "", "Idempotency-Key", "bot-"+string(rune('a'+i)))
			require.Equal(t, 201, j.code, j.raw)
			if i == 0 {
				first = j
			}
		}
		for _, base := range []string{y, x} {
			over := callFrom(t, bot, base, "POST", "/v1/events/early/tickets", "")
			require.Equal(t, 429, over.code, over.raw)
			require.Equal(t, "rate_limited", str(over, "code"))
			require.Contains(t, str(over, "detail"), "tickets_per_client (3) of the pre-queue")
			require.InDelta(t, 3600, num(over, "retry_after_s"), 10, "until the opening")
		}
		again := callFrom(t, bot, y, "POST", "/v1/events/early/tickets", "", "Idempotency-Key", "bot-a")
		require.Equal(t, 200, again.code, again.raw)
		require.Equal(t, str(first, "ticket_id"), str(again, "ticket_id"))
		require.Equal(t, 201, callFrom(t, person, y, "POST", "/v1/events/early/tickets", "").code, "another address")
		require.EqualValues(t, 4, num(call(t, x, "GET", "/v1/events/early", "", ""), "waiting"))
	})
}
