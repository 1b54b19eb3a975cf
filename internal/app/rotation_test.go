package app_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/eventually"
)

// TestTokenKeyRotationKeepsTheLine (issue 20): WAITROOM_TOKEN_KEY goes from old to new,old
// during a live line — an admitted ticket and two waiting ones. After the restart every ticket
// id handed out under old still names its ticket (status 200 with its place, leave works), the
// admitted ticket's old admission token still verifies, new tickets are made and served, and
// the line moves on; once old is removed its ids are unknown while those made under new stay
// valid. On both backends.
func TestTokenKeyRotationKeepsTheLine(t *testing.T) {
	const oldKey, newKey = "the old operator token key 0123", "the new operator token key 4567"
	for _, backend := range []string{"embedded", "redis"} {
		t.Run(backend, func(t *testing.T) {
			cfg := backendConfig(t, backend)
			// run starts an instance with token key k; stop stops it (the embedded line is
			// saved and found again by the next one).
			run := func(k string) (base string, stop func()) {
				c := cfg
				c.AdminKey, c.TokenKey, c.IdentityKey = adminKey, k, identityKey
				ctx := context.Background()
				a, err := app.New(ctx, c)
				require.NoError(t, err)
				require.NoError(t, a.Start(ctx))
				srv := httptest.NewServer(a.Handler())
				stopped := false
				stop = func() {
					if !stopped {
						stopped = true
						srv.Close()
						require.NoError(t, a.Stop(context.Background()))
					}
				}
				t.Cleanup(stop)
				return srv.URL, stop
			}

			base, stop := run(oldKey)
			require.Equal(t, 201, putEvent(t, base, "rot", `{"max_active":1,"session_ttl_s":600}`).code)
			in := call(t, base, "POST", "/v1/events/rot/tickets", "", "")
			require.Equal(t, "ADMITTED", str(in, "status"), in.raw)
			w1 := call(t, base, "POST", "/v1/events/rot/tickets", "", "")
			w2 := call(t, base, "POST", "/v1/events/rot/tickets", "", "")
			require.Equal(t, "QUEUED", str(w2, "status"))
			oldToken := str(in, "admission_token")
			stop()

			base, stop = run(newKey + "," + oldKey)
			for _, c := range []struct {
				tk       resp
				status   string
				position int64
			}{{in, "ADMITTED", 0}, {w1, "QUEUED", 1}, {w2, "QUEUED", 2}} {
				r := call(t, base, "GET", "/v1/events/rot/tickets/"+str(c.tk, "ticket_id"), "", "")
				require.Equal(t, 200, r.code, "a ticket id of the old key after the rotation: %s", r.raw)
				require.Equal(t, c.status, str(r, "status"))
				require.Equal(t, c.position, num(r, "position"))
				require.Equal(t, num(c.tk, "number"), num(r, "number"))
			}
			adm := call(t, base, "GET", "/v1/events/rot/admission", oldToken, "")
			require.Equal(t, 200, adm.code, "the admission token of the old key: %s", adm.raw)
			fresh := call(t, base, "GET", "/v1/events/rot/tickets/"+str(in, "ticket_id"), "", "")
			require.Equal(t, 200, call(t, base, "GET", "/v1/events/rot/admission", str(fresh, "admission_token"), "").code)

			w3 := call(t, base, "POST", "/v1/events/rot/tickets", "", "")
			require.Equal(t, 201, w3.code, w3.raw)
			require.EqualValues(t, 3, num(w3, "position"), "the line counts the old tickets ahead")
			// The admitted visitor leaves: the head of the line, a ticket of the old key, is
			// admitted in its place.
			require.Equal(t, 204, call(t, base, "DELETE", "/v1/events/rot/tickets/"+str(in, "ticket_id"), "", "").code)
			eventually.True(t, 10*time.Second, "the first waiting ticket is admitted", func() bool {
				r := call(t, base, "GET", "/v1/events/rot/tickets/"+str(w1, "ticket_id"), "", "")
				return r.code == 200 && str(r, "status") == "ADMITTED"
			})
			require.EqualValues(t, 1, num(call(t, base, "GET", "/v1/events/rot/tickets/"+str(w2, "ticket_id"), "", ""), "position"))
			stop()

			// Once old is removed, its ids are unknown; those made under new are not.
			base, _ = run(newKey)
			require.Equal(t, 404, call(t, base, "GET", "/v1/events/rot/tickets/"+str(w2, "ticket_id"), "", "").code)
			r := call(t, base, "GET", "/v1/events/rot/tickets/"+str(w3, "ticket_id"), "", "")
			require.Equal(t, 200, r.code, r.raw)
			require.Equal(t, "QUEUED", str(r, "status"))
		})
	}
}
