package app_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/challenge"
	"github.com/waitroom/waitroom/internal/httpapi"
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

// TestRefusalsCostABotNotAUser (issue 20): a bot sending wrong proofs of work beside a real
// user, each on an address of its own. Every challenge_failed the bot gets is held like a 429
// and taken from its bucket of joins, so after joins_per_client of them it gets 429s; its
// challenge fetches are limited too. The user, meanwhile, fetches, solves and joins at once.
// On both backends (two instances on Redis: the counts are shared).
func TestRefusalsCostABotNotAUser(t *testing.T) {
	onBothBackends(t, func(t *testing.T, x, y string) {
		r := putEvent(t, x, "guarded", `{"max_active":10,"limits":{"joins_per_client":3,"join_window_s":3600},"challenge":{"type":"pow","difficulty":4}}`)
		require.Equal(t, 201, r.code, r.raw)
		require.Equal(t, 200, call(t, y, "GET", "/v1/events/guarded", "", "").code) // y knows the event
		bot, user := clientFrom(t, "127.0.0.51"), clientFrom(t, "127.0.0.52")
		c := callFrom(t, bot, x, "GET", "/v1/events/guarded/challenge", "")
		require.Equal(t, 200, c.code, c.raw)
		wrong := "x"
		for i := 0; challenge.Solves(str(c, "challenge"), wrong, 4); i++ {
			wrong = "x" + strconv.Itoa(i)
		}
		body := `{"challenge":"` + str(c, "challenge") + `","solution":"` + wrong + `"}`
		for i, base := range []string{x, y, x} {
			sent := time.Now()
			f := callFrom(t, bot, base, "POST", "/v1/events/guarded/tickets", body)
			require.Equal(t, 403, f.code, f.raw)
			require.Equal(t, "challenge_failed", str(f, "code"))
			require.GreaterOrEqual(t, time.Since(sent), httpapi.DefaultRefusalHold, "refusal %d is held like a 429", i+1)
		}
		over := callFrom(t, bot, y, "POST", "/v1/events/guarded/tickets", body)
		require.Equal(t, 429, over.code, "three refusals took the bucket of 3: %s", over.raw)
		require.Equal(t, "rate_limited", str(over, "code"))

		// The user is served at once, on either instance.
		sent := time.Now()
		uc := callFrom(t, user, y, "GET", "/v1/events/guarded/challenge", "")
		require.Equal(t, 200, uc.code, uc.raw)
		sol, err := challenge.Solve(context.Background(), str(uc, "challenge"))
		require.NoError(t, err)
		j := callFrom(t, user, x, "POST", "/v1/events/guarded/tickets", `{"challenge":"`+str(uc, "challenge")+`","solution":"`+sol+`"}`)
		require.Equal(t, 201, j.code, j.raw)
		require.Less(t, time.Since(sent), httpapi.DefaultRefusalHold, "nothing of the user's is held")

		// Fetches: 2 x 3 per window for the bot (one made above), on both instances together.
		for i := 1; i < 6; i++ {
			require.Equal(t, 200, callFrom(t, bot, []string{x, y}[i%2], "GET", "/v1/events/guarded/challenge", "").code, "fetch %d", i+1)
		}
		sent = time.Now()
		limited := callFrom(t, bot, x, "GET", "/v1/events/guarded/challenge", "")
		require.Equal(t, 429, limited.code, limited.raw)
		require.Contains(t, str(limited, "detail"), "too many challenges")
		require.NotEmpty(t, limited.header.Get("Retry-After"))
		require.GreaterOrEqual(t, time.Since(sent), httpapi.DefaultRefusalHold)
		require.Equal(t, 200, callFrom(t, user, x, "GET", "/v1/events/guarded/challenge", "").code, "the user's own fetches")
	})
}
