package app_test

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/redistest"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// TestHistory: GET /v1/events/{event_id}/history and GET /v1/campaigns/{campaign_id}/history
// serve the samples of the shared history on both backends — with two instances on Redis the
// same samples from either, the 429s answered by both summed, both instances listed alive —
// and a ticket admitted by the processor is observed in waitroom_time_in_queue_seconds.
func TestHistory(t *testing.T) {
	const interval = 100 * time.Millisecond
	t.Run("embedded", func(t *testing.T) {
		in := start(t, app.Config{DatabaseURL: sqltest.SQLite(t), HistoryInterval: interval})
		testHistory(t, in.srv.URL, in.srv.URL)
	})
	t.Run("redis, two instances", func(t *testing.T) {
		rc := redistest.Client(t)
		prefix := redistest.Prefix(t, rc)
		db := sqltest.Postgres(t)
		x := start(t, app.Config{DatabaseURL: db, Redis: rc, RedisPrefix: prefix, HistoryInterval: interval})
		y := start(t, app.Config{DatabaseURL: db, Redis: rc, RedisPrefix: prefix, HistoryInterval: interval})
		testHistory(t, x.srv.URL, y.srv.URL)
		ins := call(t, x.srv.URL, "GET", "/v1/instances", adminKey, "")
		require.Equal(t, 200, ins.code)
		list, _ := ins.body["instances"].([]any)
		require.Len(t, list, 2, ins.raw)
		selves := 0
		for _, v := range list {
			m := v.(map[string]any)
			require.NotEmpty(t, m["instance_id"])
			require.NotEmpty(t, m["name"])
			if m["self"] == true {
				selves++
			}
		}
		require.Equal(t, 1, selves, "the instance asked is marked")
	})
}

func testHistory(t *testing.T, x, y string) {
	require.Equal(t, 201, putEvent(t, x, "hist", `{"max_active":1,"capacity":5,"limits":{"joins_per_client":3,"join_window_s":60}}`).code)
	require.Equal(t, 200, call(t, y, "GET", "/v1/events/hist", "", "").code) // y knows the event's limits
	first := call(t, x, "POST", "/v1/events/hist/tickets", "", "")
	require.Equal(t, 201, first.code)
	require.Equal(t, 201, call(t, y, "POST", "/v1/events/hist/tickets", "", "").code)
	last := call(t, x, "POST", "/v1/events/hist/tickets", "", "")
	require.Equal(t, 201, last.code)
	for _, base := range []string{x, y, x} { // over joins_per_client: 429 on either instance
		require.Equal(t, 429, call(t, base, "POST", "/v1/events/hist/tickets", "", "").code)
	}

	// The samples show the line and the 429s of both instances.
	var h resp
	eventually.True(t, 20*time.Second, "a sample with the joins, the 429s and the sale", func() bool {
		h = call(t, y, "GET", "/v1/events/hist/history", adminKey, "")
		require.Equal(t, 200, h.code, h.raw)
		s := lastSample(h)
		return s != nil && s["last_number"] == 3.0 && s["rejected_total"] == 3.0 && s["capacity"] == 5.0
	})
	s := lastSample(h)
	require.EqualValues(t, 2, s["waiting"])
	require.EqualValues(t, 1, s["active"])
	require.EqualValues(t, 1, s["max_active"])
	require.EqualValues(t, 5, s["capacity"])
	require.EqualValues(t, 0, s["unavailable_total"])
	require.EqualValues(t, 0.1, h.body["interval_s"])
	require.EqualValues(t, 3600, h.body["window_s"])
	f, _ := h.body["forecast"].(map[string]any)
	require.NotNil(t, f["sale"], "a forecast of the sale: the event sells")
	require.Contains(t, f, "clear_s")

	// The other instance serves the same samples (one sampler, shared series).
	at := s["at"].(string)
	other := call(t, x, "GET", "/v1/events/hist/history?since="+url.QueryEscape(at), adminKey, "")
	require.Equal(t, 200, other.code)
	for _, v := range other.body["samples"].([]any) {
		require.Greater(t, v.(map[string]any)["at"].(string), at, "since: only later samples")
	}
	all := call(t, x, "GET", "/v1/events/hist/history", adminKey, "")
	require.Contains(t, all.raw, `"at":"`+at+`"`, "the same sample from the other instance")

	// The long history in the database: the minute in progress already, with its line.
	eventually.True(t, 20*time.Second, "the minute's bucket with the joins", func() bool {
		lh := call(t, x, "GET", "/v1/events/hist/history?resolution_s=60", adminKey, "")
		require.Equal(t, 200, lh.code, lh.raw)
		s := lastSample(lh)
		return s != nil && s["last_number"] == 3.0 && s["waiting_max"] == 2.0 && lh.body["interval_s"] == 60.0 &&
			lh.body["window_s"] == 86400.0
	})
	require.Equal(t, 400, call(t, x, "GET", "/v1/events/hist/history?resolution_s=1", adminKey, "").code)

	// Errors.
	require.Equal(t, 401, call(t, x, "GET", "/v1/events/hist/history", "", "").code)
	require.Equal(t, 404, call(t, x, "GET", "/v1/events/nope/history", adminKey, "").code)
	bad := call(t, x, "GET", "/v1/events/hist/history?since=yesterday", adminKey, "")
	require.Equal(t, 400, bad.code)
	require.Equal(t, "invalid_query", str(bad, "code"))
	// A parameter given empty (a script's unset variable) is refused, not read as absent: an
	// audit trail asked for one event would otherwise answer with every event's.
	for _, target := range []string{"/v1/events/hist/history?since=", "/v1/events/hist/history?resolution_s=",
		"/v1/audit?event_id=", "/v1/audit?limit=", "/v1/events/hist/report?format=", "/v1/events/hist/auto?since_s="} {
		bad = call(t, x, "GET", target, adminKey, "")
		require.Equal(t, 400, bad.code, "%s: %s", target, bad.raw)
		require.Equal(t, "invalid_query", str(bad, "code"), target)
	}

	// The first person leaves: the processor admits the second, who waited; the instance whose
	// step it was observes the wait.
	tid := str(first, "ticket_id")
	require.Equal(t, 204, call(t, x, "DELETE", "/v1/events/hist/tickets/"+tid, "", "").code)
	eventually.True(t, 20*time.Second, "the wait of the admitted ticket observed", func() bool {
		n := 0.0
		for _, base := range distinct(x, y) {
			n += metric(t, base, `waitroom_time_in_queue_seconds_count{event="hist"}`)
		}
		return n == 2 // the first, admitted at once (0 s), and the second
	})
	// The same waits, measured and summed over the fleet, in the history's measured figures;
	// the 429s as refusals of the rate limits; a ticket that leaves while waiting.
	require.Equal(t, 204, call(t, y, "DELETE", "/v1/events/hist/tickets/"+str(last, "ticket_id"), "", "").code)
	eventually.True(t, 20*time.Second, "the measured figures", func() bool {
		h := call(t, x, "GET", "/v1/events/hist/history", adminKey, "")
		m, _ := h.body["measured"].(map[string]any)
		til, _ := m["time_in_line"].(map[string]any)
		ref, _ := m["refusals"].(map[string]any)
		return til["count"] == 2.0 && til["p50_s"] != nil && ref["rate_limit"] == 3.0 && m["left_waiting"] == 1.0
	})

	// A campaign's history and the list of campaigns.
	require.Equal(t, 201, call(t, x, "PUT", "/v1/campaigns/hist-promo", adminKey, `{"stock":2}`).code)
	require.Equal(t, 202, call(t, x, "POST", "/v1/campaigns/hist-promo/entries", adminKey, `{"user_id":"u1"}`).code)
	eventually.True(t, 20*time.Second, "a campaign sample with the entry", func() bool {
		c := call(t, y, "GET", "/v1/campaigns/hist-promo/history", adminKey, "")
		require.Equal(t, 200, c.code, c.raw)
		s := lastSample(c)
		return s != nil && s["entries"] == 1.0 && s["stock"] == 2.0
	})
	require.Equal(t, 404, call(t, x, "GET", "/v1/campaigns/nope/history", adminKey, "").code)
	// No long history for a campaign: asked for one, it says so instead of answering the window.
	require.Equal(t, 400, call(t, x, "GET", "/v1/campaigns/hist-promo/history?resolution_s=60", adminKey, "").code)
	require.Equal(t, 401, call(t, x, "GET", "/v1/campaigns/hist-promo/history", "", "").code)
	eventually.True(t, 10*time.Second, "the campaign listed", func() bool {
		l := call(t, y, "GET", "/v1/campaigns", adminKey, "")
		require.Equal(t, 200, l.code)
		return strings.Contains(l.raw, `"campaign_id":"hist-promo"`)
	})
	require.Equal(t, 401, call(t, x, "GET", "/v1/campaigns", "", "").code)
	eventually.True(t, 20*time.Second, "the coupon's issuance lag observed", func() bool {
		n := 0.0
		for _, base := range distinct(x, y) {
			n += metric(t, base, `waitroom_coupon_issuance_lag_seconds_count{campaign="hist-promo"}`)
		}
		return n == 1
	})
}

// distinct is the bases of the instances (one when x and y are the same instance).
func distinct(x, y string) []string {
	if x == y {
		return []string{x}
	}
	return []string{x, y}
}

// lastSample is the last sample of a history answer, nil when there is none.
func lastSample(r resp) map[string]any {
	l, _ := r.body["samples"].([]any)
	if len(l) == 0 {
		return nil
	}
	m, _ := l[len(l)-1].(map[string]any)
	return m
}

// metric reads one series of an instance's /metrics (0 when absent).
func metric(t *testing.T, base, series string) float64 {
	t.Helper()
	m := call(t, base, "GET", "/metrics", adminKey, "")
	for _, line := range strings.Split(m.raw, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	return 0
}

// TestHistoryOfANewLife: an event deleted and made again under its id starts its history
// afresh: its samples are of its new life only, and no rate runs negative where its totals
// started over (helper-68: the earlier life's samples were served, with negative rates after
// them, and fed the forecast and the report).
func TestHistoryOfANewLife(t *testing.T) {
	for _, backend := range []string{"embedded", "redis"} {
		t.Run(backend, func(t *testing.T) {
			cfg := backendConfig(t, backend)
			cfg.HistoryInterval = 100 * time.Millisecond
			in := start(t, cfg)
			base := in.srv.URL
			sampled := func(last float64) resp {
				var h resp
				eventually.True(t, 20*time.Second, "a sample of the line", func() bool {
					h = call(t, base, "GET", "/v1/events/life/history", adminKey, "")
					require.Equal(t, 200, h.code, h.raw)
					s := lastSample(h)
					return s != nil && s["last_number"] == last
				})
				return h
			}
			require.Equal(t, 201, putEvent(t, base, "life", `{"max_active":1}`).code)
			for range 3 {
				require.Equal(t, 201, call(t, base, "POST", "/v1/events/life/tickets", "", "").code)
			}
			sampled(3)
			require.Equal(t, 204, call(t, base, "DELETE", "/v1/events/life", adminKey, "").code)
			require.Equal(t, 201, putEvent(t, base, "life", `{"max_active":1}`).code)
			require.Equal(t, 201, call(t, base, "POST", "/v1/events/life/tickets", "", "").code)
			h := sampled(1)
			samples, _ := h.body["samples"].([]any)
			for _, v := range samples {
				s := v.(map[string]any)
				require.LessOrEqual(t, s["last_number"].(float64), 1.0, "a sample of the earlier life: %v", s)
				for _, k := range []string{"joins_per_s", "admissions_per_s"} {
					require.GreaterOrEqual(t, s[k].(float64), 0.0, "%s: %v", k, s)
				}
			}
		})
	}
}
