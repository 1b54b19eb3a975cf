package saleapi_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/redistest"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
	"github.com/waitroom/waitroom/internal/syncbuf"
	"github.com/waitroom/waitroom/internal/token"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*pipe)._backgroundRead"))
}

const (
	adminKey    = "sale-admin-key"
	identityKey = "identity-hmac-key-for-tests-0123"
)

type client struct {
	t    *testing.T
	base string
}

// do sends a request and decodes the JSON answer into a map.
func (c client) do(method, path, bearer string, body any, hdr ...string) (int, map[string]any) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(c.t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	require.NoError(c.t, err)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	for i := 0; i+1 < len(hdr); i += 2 { // a name given twice is sent with both values
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if len(raw) > 0 {
		require.NoError(c.t, json.Unmarshal(raw, &out), string(raw))
	}
	return resp.StatusCode, out
}

func newApp(t *testing.T, backend string) client {
	t.Helper()
	return newAppLogging(t, backend, nil)
}

// newAppLogging is newApp with the app's log written to log (nil: the default logger).
func newAppLogging(t *testing.T, backend string, log io.Writer) client {
	t.Helper()
	ctx := context.Background()
	cfg := app.Config{AdminKey: adminKey, TokenKey: "sale-token-key-0123456789", IdentityKey: identityKey}
	if log != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
	}
	switch backend {
	case "redis":
		rc := redistest.Client(t)
		cfg.RedisPrefix = redistest.Prefix(t, rc)
		cfg.Redis = rc
		cfg.DatabaseURL = sqltest.Postgres(t)
	default:
		cfg.DatabaseURL = sqltest.SQLite(t)
	}
	a, err := app.New(ctx, cfg)
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx))
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(func() {
		srv.Close()
		require.NoError(t, a.Stop(context.Background()))
	})
	return client{t: t, base: srv.URL}
}

func identity(t *testing.T, sub string) string {
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()}).
		SignedString([]byte(identityKey))
	require.NoError(t, err)
	return tok
}

func TestSaleOverHTTP(t *testing.T) {
	for _, backend := range []string{"redis", "memory"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			c := newApp(t, backend)
			code, p := c.do("PUT", "/v1/events/show", adminKey, map[string]any{"max_active": 1, "seats": []string{"A-01"}, "capacity": 2})
			require.Equal(t, 422, code, "%v", p)
			code, _ = c.do("PUT", "/v1/events/show", adminKey, map[string]any{"max_active": 1, "seats": []string{"A-01"},
				"seat_map": map[string]any{"rows": []string{"A"}, "per_row": 2}})
			require.Equal(t, 422, code)
			code, ev := c.do("PUT", "/v1/events/show", adminKey, map[string]any{"max_active": 1, "max_per_booking": 2,
				"seat_map": map[string]any{"rows": []string{"A", "B"}, "per_row": 2}})
			require.Equal(t, 201, code, "%v", ev)
			require.EqualValues(t, 4, ev["capacity"])
			require.EqualValues(t, 0, ev["sold"])
			require.Equal(t, false, ev["sold_out"])
			require.EqualValues(t, 300, ev["hold_ttl_s"])

			code, a := c.do("POST", "/v1/events/show/tickets", "", nil)
			require.Equal(t, 201, code)
			require.Equal(t, "ADMITTED", a["status"])
			tokA := a["admission_token"].(string)
			_, b := c.do("POST", "/v1/events/show/tickets", "", nil)
			require.Equal(t, "QUEUED", b["status"])

			code, p = c.do("POST", "/v1/events/show/holds", "", map[string]any{"seats": []string{"A-01"}})
			require.Equal(t, 401, code, "%v", p)
			code, p = c.do("POST", "/v1/events/show/holds", tokA, map[string]any{"seats": []string{"A-01", "Z-9"}})
			require.Equal(t, 422, code)
			require.Equal(t, []any{"Z-9"}, p["unknown_seats"])
			code, p = c.do("POST", "/v1/events/show/holds", tokA, map[string]any{"seats": []string{"A-01", "A-01"}})
			require.Equal(t, 422, code, "%v", p)
			require.Equal(t, "invalid_hold", p["code"])
			require.Nil(t, p["unknown_seats"], "A-01 is a known seat, listed twice")
			require.Contains(t, p["detail"], `"A-01" is listed twice`)
			code, _ = c.do("POST", "/v1/events/show/holds", tokA, map[string]any{"seats": []string{"A-01", "A-02", "B-01"}})
			require.Equal(t, 422, code, "more than max_per_booking")
			code, h := c.do("POST", "/v1/events/show/holds", tokA, map[string]any{"seats": []string{"A-02", "A-01"}})
			require.Equal(t, 201, code, "%v", h)
			require.Equal(t, []any{"A-01", "A-02"}, h["seats"])
			holdA := h["hold_id"].(string)
			code, st := c.do("GET", "/v1/events/show/seats", "", nil)
			require.Equal(t, 200, code)
			require.Equal(t, map[string]any{"A-01": "held", "A-02": "held", "B-01": "available", "B-02": "available"}, st["seats"])
			require.EqualValues(t, 2, st["available"])

			code, bk := c.do("POST", "/v1/events/show/bookings", tokA, map[string]any{"hold_id": holdA}, "Idempotency-Key", "k1")
			require.Equal(t, 201, code, "%v", bk)
			bookingA := bk["booking_id"].(string)
			code, again := c.do("POST", "/v1/events/show/bookings", tokA, map[string]any{"hold_id": holdA}, "Idempotency-Key", "k1")
			require.Equal(t, 200, code, "a retry after the session ended")
			require.Equal(t, bookingA, again["booking_id"])
			code, p = c.do("POST", "/v1/events/show/bookings", tokA, map[string]any{"hold_id": holdA}, "Idempotency-Key", "k2")
			require.Equal(t, 409, code)
			require.Equal(t, "already_booked", p["code"])
			code, tk := c.do("GET", "/v1/events/show/tickets/"+a["ticket_id"].(string), "", nil)
			require.Equal(t, 200, code)
			require.Equal(t, "COMPLETED", tk["status"])
			require.Equal(t, bookingA, tk["booking_id"])
			code, got := c.do("GET", "/v1/events/show/bookings/"+bookingA, tokA, nil)
			require.Equal(t, 200, code)
			require.Equal(t, "CONFIRMED", got["status"])
			code, _ = c.do("GET", "/v1/events/show/bookings/"+bookingA, "", nil)
			require.Equal(t, 401, code)
			code, _ = c.do("GET", "/v1/events/show/bookings/"+bookingA, adminKey, nil)
			require.Equal(t, 200, code)

			// The completed session freed the slot: the next in line is admitted.
			var tokB string
			eventually.True(t, 20*time.Second, "the second ticket admitted", func() bool {
				_, b = c.do("GET", "/v1/events/show/tickets/"+b["ticket_id"].(string), "", nil)
				tok, _ := b["admission_token"].(string)
				tokB = tok
				return b["status"] == "ADMITTED"
			})
			code, p = c.do("POST", "/v1/events/show/holds", tokB, map[string]any{"seats": []string{"A-01", "B-01"}})
			require.Equal(t, 409, code)
			require.Equal(t, []any{"A-01"}, p["conflicts"])
			_, h = c.do("POST", "/v1/events/show/holds", tokB, map[string]any{"seats": []string{"B-01", "B-02"}})
			code, p = c.do("POST", "/v1/events/show/bookings", tokA, map[string]any{"hold_id": h["hold_id"]})
			require.Equal(t, 409, code, "ticket A booked already: %v", p)
			code, _ = c.do("DELETE", "/v1/events/show/holds/"+h["hold_id"].(string), tokA, nil)
			require.Equal(t, 403, code, "only the holder releases")
			code, bk = c.do("POST", "/v1/events/show/bookings", tokB, map[string]any{"hold_id": h["hold_id"]})
			require.Equal(t, 201, code, "%v", bk)
			_, ev = c.do("GET", "/v1/events/show", "", nil)
			require.EqualValues(t, 4, ev["sold"])
			require.Equal(t, true, ev["sold_out"])
			code, p = c.do("POST", "/v1/events/show/tickets", "", nil)
			require.Equal(t, 410, code)
			require.Equal(t, "sold_out", p["code"])

			// The admin cancels: units back, the sale reopens.
			code, _ = c.do("DELETE", "/v1/events/show/bookings/"+bookingA, "", nil)
			require.Equal(t, 401, code)
			code, got = c.do("DELETE", "/v1/events/show/bookings/"+bookingA, adminKey, nil)
			require.Equal(t, 200, code)
			require.Equal(t, "CANCELLED", got["status"])
			_, ev = c.do("GET", "/v1/events/show", "", nil)
			require.EqualValues(t, 2, ev["sold"])
			require.Equal(t, false, ev["sold_out"])
			code, _ = c.do("POST", "/v1/events/show/tickets", "", nil)
			require.Equal(t, 201, code)
			_, st = c.do("GET", "/v1/events/show/seats", "", nil)
			require.Equal(t, "available", st["seats"].(map[string]any)["A-01"])
			// A configuration that would drop what was sold is refused, saying what it would drop.
			code, p = c.do("PUT", "/v1/events/show", adminKey, map[string]any{"max_active": 1, "capacity": 1})
			require.Equal(t, 409, code, "%v", p)
			require.Equal(t, "would_drop_sold", p["code"])
			code, p = c.do("PUT", "/v1/events/show", adminKey, map[string]any{"max_active": 5})
			require.Equal(t, 409, code, "a PUT without the seat map would drop the sold seats: %v", p)
			require.Len(t, p["sold_seats_dropped"], 2)
			// Becoming general admission, with room for the units sold, says so (it read as a
			// seat list leaving seats out, when there was no seat list).
			code, p = c.do("PUT", "/v1/events/show", adminKey, map[string]any{"max_active": 5, "capacity": 8})
			require.Equal(t, 409, code, "%v", p)
			require.Contains(t, p["detail"], "general admission would drop the 2 sold seats")
			// A PATCH changes only what it names.
			code, ev = c.do("PATCH", "/v1/events/show", adminKey, map[string]any{"max_active": 5})
			require.Equal(t, 200, code, "%v", ev)
			require.EqualValues(t, 5, ev["max_active"])
			require.EqualValues(t, 4, ev["capacity"])
			require.EqualValues(t, 2, ev["max_per_booking"])
			require.NotNil(t, ev["seat_map"])
			require.EqualValues(t, 2, ev["sold"])
		})
	}
}

func TestCampaignOverHTTP(t *testing.T) {
	for _, backend := range []string{"redis", "memory"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			c := newApp(t, backend)
			code, cp := c.do("PUT", "/v1/campaigns/drop", adminKey, map[string]any{"stock": 1})
			require.Equal(t, 201, code, "%v", cp)
			code, _ = c.do("PUT", "/v1/campaigns/drop", "", map[string]any{"stock": 1})
			require.Equal(t, 401, code)
			code, p := c.do("POST", "/v1/campaigns/drop/entries", "", map[string]any{})
			require.Equal(t, 401, code, "%v", p)
			code, _ = c.do("POST", "/v1/campaigns/drop/entries", "", map[string]any{"user_id": "u1"})
			require.Equal(t, 401, code, "user_id needs the admin key")
			code, e := c.do("POST", "/v1/campaigns/drop/entries", adminKey, map[string]any{"user_id": "u1"})
			require.Equal(t, 202, code, "%v", e)
			require.EqualValues(t, 1, e["position"])
			code, e = c.do("POST", "/v1/campaigns/drop/entries", "", map[string]any{"identity": identity(t, "u2")})
			require.Equal(t, 202, code, "%v", e)
			require.EqualValues(t, 2, e["position"])
			require.Equal(t, "REJECTED", e["status"])
			code, e = c.do("POST", "/v1/campaigns/drop/entries", adminKey, map[string]any{"user_id": "u1"})
			require.Equal(t, 200, code, "a repeat entry")
			require.EqualValues(t, 1, e["position"])
			eventually.True(t, 20*time.Second, "the coupon issued", func() bool {
				_, e = c.do("GET", "/v1/campaigns/drop/entries/u1", adminKey, nil)
				return e["status"] == "ISSUED"
			})
			require.NotEmpty(t, e["coupon_code"])
			code, mine := c.do("GET", "/v1/campaigns/drop/entries/u1", identity(t, "u1"), nil)
			require.Equal(t, 200, code)
			require.Equal(t, e["coupon_code"], mine["coupon_code"])
			code, _ = c.do("GET", "/v1/campaigns/drop/entries/u1", identity(t, "u2"), nil)
			require.Equal(t, 403, code)
			code, _ = c.do("GET", "/v1/campaigns/drop/entries/u1", "", nil)
			require.Equal(t, 401, code)
			// A wrong admin key is told the call's credentials, a broken JWT why it failed.
			code, p = c.do("GET", "/v1/campaigns/drop/entries/u1", "not-the-admin-key", nil)
			require.Equal(t, 401, code)
			require.Equal(t, "unauthorized", p["code"])
			code, p = c.do("GET", "/v1/campaigns/drop/entries/u1", "eyJhbGciOiJFZERTQSJ9.e30.c2ln", nil)
			require.Equal(t, 401, code)
			require.Equal(t, "invalid_identity", p["code"])
			code, _ = c.do("GET", "/v1/campaigns/drop/entries/u9", adminKey, nil)
			require.Equal(t, 404, code)
			_, cp = c.do("GET", "/v1/campaigns/drop", "", nil)
			require.EqualValues(t, 1, cp["issued"])
			require.EqualValues(t, 1, cp["rejected"])
			require.EqualValues(t, 0, cp["pending"])
		})
	}
}

// TestPurchaseLimitAcrossBookings: max_per_user caps one identity's units across its
// bookings, re-joining after each booking does not help (issue 12: hoarding), and the refusal
// says what remains; another user buys freely.
func TestPurchaseLimitAcrossBookings(t *testing.T) {
	for _, backend := range []string{"redis", "memory"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			var log syncbuf.Buffer
			c := newAppLogging(t, backend, &log)
			code, ev := c.do("PUT", "/v1/events/drop", adminKey, map[string]any{"max_active": 5, "capacity": 100,
				"max_per_booking": 4, "max_per_user": 6, "identity_required": true})
			require.Equal(t, 201, code, "%v", ev)
			require.EqualValues(t, 6, ev["max_per_user"])
			var ticket string // the last buy's ticket id
			buy := func(sub string, qty int) (int, map[string]any) {
				code, tk := c.do("POST", "/v1/events/drop/tickets", "", map[string]any{"identity": identity(t, sub)})
				require.Contains(t, []int{200, 201}, code, "%v", tk)
				require.Equal(t, "ADMITTED", tk["status"], "%v", tk)
				ticket = tk["ticket_id"].(string)
				tok := tk["admission_token"].(string)
				code, h := c.do("POST", "/v1/events/drop/holds", tok, map[string]any{"quantity": qty})
				require.Equal(t, 201, code, "%v", h)
				return c.do("POST", "/v1/events/drop/bookings", tok, map[string]any{"hold_id": h["hold_id"]})
			}
			held := func() any {
				code, av := c.do("GET", "/v1/events/drop/seats", "", nil)
				require.Equal(t, 200, code, "%v", av)
				return av["held"]
			}
			code, bk := buy("hoarder", 4)
			require.Equal(t, 201, code, "%v", bk)
			code, p := buy("hoarder", 4) // a new ticket: the first one completed with its booking
			require.Equal(t, 409, code, "%v", p)
			require.Equal(t, "purchase_limit", p["code"])
			require.EqualValues(t, 2, p["remaining"])
			code, bk = buy("hoarder", 2)
			require.Equal(t, 201, code, "%v", bk)
			code, p = buy("hoarder", 1)
			require.Equal(t, 409, code, "%v", p)
			require.EqualValues(t, 0, p["remaining"])
			// The refused booking's hold is not kept for the booking's grace once its ticket
			// leaves: a user at the limit cannot park units by buying, leaving and buying again.
			code, p = buy("hoarder", 4)
			require.Equal(t, 409, code, "%v", p)
			require.EqualValues(t, 4, held())
			code, _ = c.do("DELETE", "/v1/events/drop/tickets/"+ticket, "", nil)
			require.Equal(t, 204, code)
			require.EqualValues(t, 0, held(), "the hold went with the ticket")
			code, bk = buy("someone-else", 4)
			require.Equal(t, 201, code, "%v", bk)
			// A refusal is a known outcome: nothing to re-read, no warning.
			require.NotContains(t, log.String(), "outcome unknown")
		})
	}
}

// TestBadIDsAre4xx: ids and keys with a NUL or invalid UTF-8 are refused with a 4xx (never a
// 5xx), and a NUL user id cannot enter a campaign to stall the entries behind it.
func TestBadIDsAre4xx(t *testing.T) {
	for _, backend := range []string{"redis", "memory"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			c := newApp(t, backend)
			code, _ := c.do("PUT", "/v1/events/show", adminKey, map[string]any{"max_active": 1, "capacity": 10})
			require.Equal(t, 201, code)
			code, tk := c.do("POST", "/v1/events/show/tickets", "", nil)
			require.Equal(t, 201, code)
			tok := tk["admission_token"].(string)
			code, h := c.do("POST", "/v1/events/show/holds", tok, map[string]any{"quantity": 1})
			require.Equal(t, 201, code)
			// The join's rule of an Idempotency-Key (token.ValidIdempotencyKey), with its code:
			// not UTF-8, not ASCII, empty, over 128 bytes, or two values. (A NUL or other control
			// character in a header is refused by net/http itself.)
			for _, hdr := range [][]string{{"\xff\xfe"}, {"caf\xe9"}, {"café"}, {""}, {strings.Repeat("k", 129)}, {"k1", "k2"}} {
				args := []string{}
				for _, key := range hdr {
					args = append(args, "Idempotency-Key", key)
				}
				code, p := c.do("POST", "/v1/events/show/bookings", tok, map[string]any{"hold_id": h["hold_id"]}, args...)
				require.Equal(t, 400, code, "%q: %v", hdr, p)
				require.Equal(t, "invalid_idempotency_key", p["code"], "%q", hdr)
				if len(hdr) > 1 { // as a join with two keys is told
					require.Equal(t, token.OneIdempotencyKey, p["detail"])
				}
			}
			// A hold id that is no text is told so, not that it is missing.
			for hold, detail := range map[string]string{"": "hold_id is required", "x\x00y": "hold_id must be at most 64 bytes",
				strings.Repeat("h", 65): "hold_id must be at most 64 bytes"} {
				code, p := c.do("POST", "/v1/events/show/bookings", tok, map[string]any{"hold_id": hold})
				require.Equal(t, 422, code, "%q: %v", hold, p)
				require.Equal(t, "invalid_field", p["code"])
				require.Contains(t, p["detail"], detail, "%q", hold)
			}
			// Nothing was booked: the longest valid key books the hold.
			code, bk := c.do("POST", "/v1/events/show/bookings", tok, map[string]any{"hold_id": h["hold_id"]}, "Idempotency-Key", strings.Repeat("k", 128))
			require.Equal(t, 201, code, "%v", bk)
			for _, id := range []string{"bk_%00x", "bk_%FF"} {
				code, p := c.do("GET", "/v1/events/show/bookings/"+id, adminKey, nil)
				require.Equal(t, 400, code, "%v", p)
				require.Equal(t, "invalid_id", p["code"])
				code, _ = c.do("DELETE", "/v1/events/show/holds/"+id, tok, nil)
				require.Equal(t, 400, code)
			}
			code, _ = c.do("PUT", "/v1/campaigns/drop", adminKey, map[string]any{"stock": 1})
			require.Equal(t, 201, code)
			code, p := c.do("POST", "/v1/campaigns/drop/entries", adminKey, map[string]any{"user_id": "u\x00"})
			require.Equal(t, 422, code, "%v", p)
			code, _ = c.do("GET", "/v1/campaigns/drop/entries/u%00", adminKey, nil)
			require.Equal(t, 400, code)
			code, _ = c.do("POST", "/v1/campaigns/drop/entries", adminKey, map[string]any{"user_id": "u1"})
			require.Equal(t, 202, code, "a good entry is taken")
		})
	}
}

// An event deleted and made again at once starts afresh: nothing of the old life's sale (its
// sold units, its bookings) carries over, though no sale sync ran between the two requests.
// Its confirmed booking keeps it from being deleted without ?drop_sold=true (409
// would_drop_sold, nothing deleted).
func TestRecreatedEventSellsAfresh(t *testing.T) {
	for _, backend := range []string{"redis", "memory"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			c := newApp(t, backend)
			put := func() {
				code, ev := c.do("PUT", "/v1/events/life", adminKey, map[string]any{"max_active": 1, "capacity": 1})
				require.Equal(t, 201, code, "%v", ev)
			}
			put()
			code, tk := c.do("POST", "/v1/events/life/tickets", "", nil)
			require.Equal(t, 201, code, "%v", tk)
			tok := tk["admission_token"].(string)
			code, h := c.do("POST", "/v1/events/life/holds", tok, map[string]any{"quantity": 1})
			require.Equal(t, 201, code, "%v", h)
			code, bk := c.do("POST", "/v1/events/life/bookings", tok, map[string]any{"hold_id": h["hold_id"]})
			require.Equal(t, 201, code, "%v", bk)
			_, ev := c.do("GET", "/v1/events/life", "", nil)
			require.Equal(t, true, ev["sold_out"], "%v", ev)

			code, refused := c.do("DELETE", "/v1/events/life", adminKey, nil)
			require.Equal(t, 409, code, "an event with a confirmed booking: %v", refused)
			require.Equal(t, "would_drop_sold", refused["code"])
			require.EqualValues(t, 1, refused["bookings"])
			require.EqualValues(t, 1, refused["sold"])
			_, ev = c.do("GET", "/v1/events/life", "", nil)
			require.Equal(t, true, ev["sold_out"], "nothing deleted: %v", ev)
			code, refused = c.do("DELETE", "/v1/events/life?drop_sold=yes", adminKey, nil)
			require.Equal(t, 400, code, "%v", refused)
			require.Equal(t, "invalid_query", refused["code"])
			code, _ = c.do("DELETE", "/v1/events/life?drop_sold=true", adminKey, nil)
			require.Equal(t, 204, code)
			put()
			code, tk = c.do("POST", "/v1/events/life/tickets", "", nil)
			require.Equal(t, 201, code, "the new life is not sold out: %v", tk)
			var st map[string]any
			eventually.True(t, 10*time.Second, "the new life's inventory", func() bool {
				code, st = c.do("GET", "/v1/events/life/seats", "", nil)
				return code == 200 && st["capacity"] != nil
			})
			require.EqualValues(t, 0, st["sold"], "%v", st)
			require.EqualValues(t, 1, st["available"], "%v", st)
			require.Equal(t, false, st["sold_out"], "%v", st)
			_, ev = c.do("GET", "/v1/events/life", "", nil)
			require.EqualValues(t, 0, ev["sold"], "%v", ev)
			require.Equal(t, false, ev["sold_out"], "%v", ev)
			code, bk = c.do("GET", "/v1/events/life/bookings/"+bk["booking_id"].(string), adminKey, nil)
			require.Equal(t, 404, code, "the old life's booking: %v", bk)
		})
	}
}

// TestSeatTakenOffIsNotSold: a seat the operator takes off an event's list while a ticket holds
// it is not sold by that hold (the hold is dropped with the change), so the event sells out
// only when every listed seat is sold and its next writes are not refused for a seat it no
// longer lists. So for a hold of a quantity when the event becomes seated. (Both were sold.)
func TestSeatTakenOffIsNotSold(t *testing.T) {
	for _, backend := range []string{"redis", "memory"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			c := newApp(t, backend)
			code, ev := c.do("PUT", "/v1/events/drop", adminKey, map[string]any{"max_active": 10, "seats": []string{"A", "B", "C"}})
			require.Equal(t, 201, code, "%v", ev)
			admitted := func() string {
				t.Helper()
				code, tk := c.do("POST", "/v1/events/drop/tickets", "", nil)
				require.Equal(t, 201, code, "%v", tk)
				return tk["admission_token"].(string)
			}
			t1, t2, t3 := admitted(), admitted(), admitted()
			code, h := c.do("POST", "/v1/events/drop/holds", t1, map[string]any{"seats": []string{"C"}})
			require.Equal(t, 201, code, "%v", h)
			code, ev = c.do("PATCH", "/v1/events/drop", adminKey, map[string]any{"seats": []string{"A", "B"}})
			require.Equal(t, 200, code, "%v", ev)
			code, bk := c.do("POST", "/v1/events/drop/bookings", t1, map[string]any{"hold_id": h["hold_id"]})
			require.Equal(t, 404, code, "the hold on the seat taken off: %v", bk)
			require.Equal(t, "hold_not_found", bk["code"])
			for i, tok := range []string{t2, t3} {
				seat := []string{"A", "B"}[i]
				code, h := c.do("POST", "/v1/events/drop/holds", tok, map[string]any{"seats": []string{seat}})
				require.Equal(t, 201, code, "%v", h)
				code, bk := c.do("POST", "/v1/events/drop/bookings", tok, map[string]any{"hold_id": h["hold_id"]})
				require.Equal(t, 201, code, "%v", bk)
			}
			code, st := c.do("GET", "/v1/events/drop/seats", "", nil)
			require.Equal(t, 200, code)
			require.EqualValues(t, 2, st["sold"], "%v", st)
			require.Equal(t, true, st["sold_out"], "%v", st)
			require.Equal(t, map[string]any{"A": "sold", "B": "sold"}, st["seats"], "%v", st)
			code, ev = c.do("PATCH", "/v1/events/drop", adminKey, map[string]any{"name": "renamed"})
			require.Equal(t, 200, code, "%v", ev)

			// General admission becoming seated: a hold of a quantity is not sold.
			code, ev = c.do("PUT", "/v1/events/kind", adminKey, map[string]any{"max_active": 10, "capacity": 4})
			require.Equal(t, 201, code, "%v", ev)
			code, tk := c.do("POST", "/v1/events/kind/tickets", "", nil)
			require.Equal(t, 201, code, "%v", tk)
			tok := tk["admission_token"].(string)
			code, h = c.do("POST", "/v1/events/kind/holds", tok, map[string]any{"quantity": 2})
			require.Equal(t, 201, code, "%v", h)
			code, ev = c.do("PATCH", "/v1/events/kind", adminKey, map[string]any{"capacity": nil, "seats": []string{"A", "B", "C", "D"}})
			require.Equal(t, 200, code, "%v", ev)
			code, bk = c.do("POST", "/v1/events/kind/bookings", tok, map[string]any{"hold_id": h["hold_id"]})
			require.Equal(t, 404, code, "a hold of a quantity on an event now seated: %v", bk)
			code, st = c.do("GET", "/v1/events/kind/seats", "", nil)
			require.Equal(t, 200, code)
			require.EqualValues(t, 0, st["sold"], "%v", st)
			require.EqualValues(t, 0, st["held"], "%v", st)
		})
	}
}

// TestSeatMapIsCompressedAndRevalidated: a large seated event's seat map (5,000 seats: ~100 KB
// of JSON, 1 MB at 50,000) goes gzip-encoded to a client that accepts it, the same map as
// without; its ETag turns a poller's If-None-Match into a 304 with no body until a seat
// changes, and then into the new map.
func TestSeatMapIsCompressedAndRevalidated(t *testing.T) {
	c := newApp(t, "memory")
	code, ev := c.do("PUT", "/v1/events/hall", adminKey, map[string]any{"max_active": 5,
		"seat_map": map[string]any{"rows": []string{"A", "B", "C", "D", "E"}, "per_row": 1000}})
	require.Equal(t, 201, code, "%v", ev)
	raw := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	get := func(header ...string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest("GET", c.base+"/v1/events/hall/seats", nil)
		require.NoError(t, err)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := raw.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, b
	}
	plain, body := get()
	require.Equal(t, 200, plain.StatusCode)
	require.Empty(t, plain.Header.Get("Content-Encoding"))
	require.Greater(t, len(body), 100_000)
	etag := plain.Header.Get("ETag")
	require.Regexp(t, `^"[0-9a-f]{24}"$`, etag)

	for _, accept := range []string{"gzip", "br;q=1.0, gzip;q=0.5", "*", "GZIP", "identity;q=0.1, *;q=0.2", "x-gzip"} {
		resp, zbody := get("Accept-Encoding", accept)
		require.Equal(t, 200, resp.StatusCode, accept)
		require.Equal(t, "gzip", resp.Header.Get("Content-Encoding"), accept)
		require.Equal(t, "Accept-Encoding", resp.Header.Get("Vary"))
		require.Less(t, len(zbody)*5, len(body), "%s: %d bytes gzip of %d", accept, len(zbody), len(body))
		zr, err := gzip.NewReader(bytes.NewReader(zbody))
		require.NoError(t, err)
		unzipped, err := io.ReadAll(zr)
		require.NoError(t, err)
		require.Equal(t, body, unzipped, accept)
		require.Equal(t, strings.TrimSuffix(etag, `"`)+`-gz"`, resp.Header.Get("ETag"))
	}
	for _, refused := range []string{"gzip;q=0", "identity", "br", "gzip;q=0, *", "*, gzip;q=0", "gzip; q = 0", "gzip;q=abc", "*;q=0"} {
		resp, _ := get("Accept-Encoding", refused)
		require.Empty(t, resp.Header.Get("Content-Encoding"), refused)
	}

	for _, tag := range []string{etag, "W/" + etag, `"other", ` + etag, strings.TrimSuffix(etag, `"`) + `-gz"`, "*"} {
		resp, b := get("If-None-Match", tag, "Accept-Encoding", "gzip")
		require.Equal(t, 304, resp.StatusCode, tag)
		require.Empty(t, b)
	}
	resp, _ := get("If-None-Match", `"other"`)
	require.Equal(t, 200, resp.StatusCode)

	code, tk := c.do("POST", "/v1/events/hall/tickets", "", nil)
	require.Equal(t, 201, code)
	code, h := c.do("POST", "/v1/events/hall/holds", tk["admission_token"].(string), map[string]any{"seats": []string{"C-0500"}})
	require.Equal(t, 201, code, "%v", h)
	resp, b := get("If-None-Match", etag)
	require.Equal(t, 200, resp.StatusCode, "a seat changed: the new map")
	require.NotEqual(t, etag, resp.Header.Get("ETag"))
	require.Contains(t, string(b), `"C-0500":"held"`)
}
