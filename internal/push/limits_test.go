package push

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/eventually"
)

// TestPushConnectionsPerClient: one client holds at most the event's push_per_client
// connections on an instance (429 rate_limited beyond), and gets its place back when one
// closes.
func TestPushConnectionsPerClient(t *testing.T) {
	t.Parallel()
	n := startFleet(t, fleetOpts{embedded: true, hub: Config{ClientKey: func(*http.Request) string { return "198.51.100.1" }}})[0]
	putEvent(t, n, event.Event{ID: "ev", MaxActive: 1, Limits: event.Limits{PushPerClient: 2}})
	var ids []string
	for i := 0; i < 3; i++ {
		_, id := join(t, n, "ev")
		ids = append(ids, id)
	}
	a := openSSE(t, n.srv.URL, "ev", ids[0], "")
	openSSE(t, n.srv.URL, "ev", ids[1], "")
	resp, err := http.Get(n.srv.URL + "/v1/events/ev/tickets/" + ids[2] + "/events")
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))

	_ = a.resp.Body.Close()
	eventually.True(t, 10*time.Second, "the closed stream's place to be free", func() bool {
		resp, err := http.Get(n.srv.URL + "/v1/events/ev/tickets/" + ids[2] + "/events")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// TestSSEIDsPerConnection: a huge Last-Event-ID restarts that stream's ids at 1 and moves no
// other stream's ids.
func TestSSEIDsPerConnection(t *testing.T) {
	t.Parallel()
	n := startFleet(t, fleetOpts{embedded: true})[0]
	putEvent(t, n, event.Event{ID: "ev", MaxActive: 1})
	join(t, n, "ev")
	_, id := join(t, n, "ev")
	wrapped := openSSE(t, n.srv.URL, "ev", id, "18446744073709551615").nextEvent(t, 5*time.Second)
	require.Equal(t, "1", wrapped.id)
	resumed := openSSE(t, n.srv.URL, "ev", id, "41").nextEvent(t, 5*time.Second)
	require.Equal(t, "42", resumed.id)
	fresh := openSSE(t, n.srv.URL, "ev", id, "").nextEvent(t, 5*time.Second)
	got, err := strconv.ParseUint(fresh.id, 10, 64)
	require.NoError(t, err)
	require.Equal(t, uint64(1), got, "ids are per connection")
}

func TestDefaultMaxConnsFor(t *testing.T) {
	require.Equal(t, 16_000, DefaultMaxConnsFor(20_000))
	require.Equal(t, 1024-1024+1, DefaultMaxConnsFor(1024))
	require.Equal(t, 3072, DefaultMaxConnsFor(4096))
	require.Equal(t, DefaultMaxConns, DefaultMaxConnsFor(1<<20))
	require.Equal(t, DefaultMaxConns, DefaultMaxConnsFor(0))
	require.Greater(t, Config{}.WithDefaults().MaxConns, 0)
	if l := openFileLimit(); l > 0 {
		require.Less(t, uint64(Config{}.WithDefaults().MaxConns), l, "the cap stays under the open-file limit")
	}
}
