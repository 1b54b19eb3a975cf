package sqlstore_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/waitroom/waitroom/internal/admin"
	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/sale"
	"github.com/waitroom/waitroom/internal/sqlstore"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// backends are the databases every behaviour runs against; url returns a fresh, empty database
// that is removed when the test ends.
var backends = []struct {
	name    string
	dialect string
	url     func(t testing.TB) string
}{
	{"sqlite", sqlstore.DialectSQLite, sqltest.SQLite},
	{"postgres", sqlstore.DialectPostgres, sqltest.Postgres},
}

// behaviours run once per backend, each on its own fresh database.
var behaviours = []struct {
	name string
	run  func(t *testing.T, url string)
}{
	{"create then update keeps generation and created_at", testCreateUpdate},
	{"line numbers only rise, seq ceilings aligned, deleted with the event", testLineNumbers},
	{"zero times are NULL and times round trip in UTC ms", testTimesRoundTrip},
	{"list is ordered by id", testListOrder},
	{"delete", testDelete},
	{"missing records are their domain's not-found error", testNotFound},
	{"a taken admin key name or hash is admin.ErrKeyExists", testAdminKeyExists},
	{"revoking an admin key revokes the keys it minted; a key admin revokes its own lineage", testAdminKeyLineage},
	{"a mint racing its minter's revocation leaves no live key", testAdminKeyMintRacesRevoke},
	{"SettingOrInit gives concurrent callers one value", testSettingOrInitConcurrent},
	{"snapshot upsert, load, delete", testSnapshots},
	{"re-open runs migrations idempotently", testReopen},
	{"concurrent opens of a fresh database", testConcurrentOpen},
	{"max_per_user holds for concurrent bookings of one user", testPurchaseLimitConcurrent},
	{"concurrent bookings sell out exactly at capacity", testSellOutExactly},
	{"units across slots: big bookings, cancellations, capacity changes", testUnitsAcrossSlots},
}

func TestBehaviours(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for _, bh := range behaviours {
				t.Run(bh.name, func(t *testing.T) {
					t.Parallel()
					url := b.url(t)
					t.Cleanup(func() {
						// Every behaviour leaves the database of the expected dialect.
						db, err := sqlstore.Open(context.Background(), url)
						if assert.NoError(t, err) {
							assert.Equal(t, b.dialect, db.Dialect())
							assert.NoError(t, db.Ping(context.Background()))
							assert.NoError(t, db.Close())
						}
					})
					bh.run(t, url)
				})
			}
		})
	}
}

// open opens url and closes it when the test ends.
func open(t *testing.T, url string) *sqlstore.DB {
	t.Helper()
	db, err := sqlstore.Open(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, db.Close()) })
	return db
}

func sampleEvent(id string) event.Event {
	return event.Event{
		ID:          id,
		Name:        "Concert " + id,
		MaxActive:   500,
		AdmitRate:   12.5,
		SessionTTL:  15 * time.Minute,
		ClaimTTL:    90 * time.Second,
		RedirectURL: "https://shop.example/" + id,
		// Issue 12's settings round-trip too.
		Limits:           event.Limits{JoinsPerClient: 50, JoinWindow: 30 * time.Second, PollsPerTicket: 7},
		IdentityRequired: true,
		MaxPerUser:       6,
		SessionMax:       600 * time.Second,
		// Issue 10's page too.
		Page: event.Page{Title: "봄 콘서트", Message: "Doors at seven.", LogoURL: "https://cdn.example/logo.svg",
			Colors: event.PageColors{Accent: "#7a1f1f", Text: "#111"}, Language: "ko", Unit: "seats",
			Template: "<header class=\"shop\">{{title}}</header>\n{{room}}", CSS: ".shop { color: #123; }\n"},
		Challenge: event.Challenge{Type: event.ChallengeExternal, SiteverifyURL: "https://captcha.example/siteverify", Secret: "s3cret"},
	}
}

func testCreateUpdate(t *testing.T, url string) {
	ctx := t.Context()
	db := open(t, url)

	before := time.Now().UTC().Truncate(time.Millisecond)
	in := sampleEvent("concert")
	in.CreatedAt = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC) // ignored
	first, created, err := db.PutEvent(ctx, in)
	require.NoError(t, err)
	assert.True(t, created, "first put is an insert")
	assert.Equal(t, int64(1), first.Version, "a new event is version 1")
	assert.False(t, first.CreatedAt.Before(before), "CreatedAt is set by the store")
	assert.Equal(t, first.CreatedAt, first.UpdatedAt)
	assert.Equal(t, time.UTC, first.CreatedAt.Location())

	got, err := db.GetEvent(ctx, "concert")
	require.NoError(t, err)
	assert.Equal(t, first, got, "stored is what GetEvent returns")

	upd := sampleEvent("concert")
	upd.Name = "Renamed"
	upd.MaxActive = 7
	upd.AdmitRate = 0
	upd.RedirectURL = ""
	upd.Challenge = event.Challenge{Type: event.ChallengePow, Difficulty: 17}
	upd.Page = event.Page{}                                     // the plain page again (NULL)
	upd.Version = 99                                            // ignored: the database counts
	upd.CreatedAt = first.CreatedAt.Add(-time.Hour)             // ignored
	upd.UpdatedAt = time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC) // ignored
	second, created, err := db.PutEvent(ctx, upd)
	require.NoError(t, err)
	assert.False(t, created, "second put is an update")
	assert.Equal(t, first.Version+1, second.Version, "each update is one more version")
	assert.Equal(t, first.CreatedAt, second.CreatedAt, "created_at kept on update")
	assert.False(t, second.UpdatedAt.Before(first.UpdatedAt), "updated_at moves forward")
	assert.Equal(t, "Renamed", second.Name)
	assert.Equal(t, int64(7), second.MaxActive)
	assert.Zero(t, second.AdmitRate)
	assert.Empty(t, second.RedirectURL)
	assert.Equal(t, event.Challenge{Type: event.ChallengePow, Difficulty: 17}, second.Challenge)
	assert.True(t, second.Page.IsZero())

	got, err = db.GetEvent(ctx, "concert")
	require.NoError(t, err)
	assert.Equal(t, second, got)

	// Versions come from the database, whatever the writers' clocks: concurrent writers get
	// distinct ones.
	var wg sync.WaitGroup
	versions := make(chan int64, 8)
	for range 8 {
		wg.Go(func() {
			e, _, err := db.PutEvent(ctx, sampleEvent("concert"))
			if assert.NoError(t, err) {
				versions <- e.Version
			}
		})
	}
	wg.Wait()
	close(versions)
	seen := map[int64]bool{}
	for v := range versions {
		assert.False(t, seen[v], "version %d given twice", v)
		assert.Greater(t, v, second.Version)
		seen[v] = true
	}

	_, _, err = db.PutEvent(ctx, event.Event{})
	assert.Error(t, err, "empty ID is rejected")
	nan := sampleEvent("nan")
	nan.AdmitRate = math.NaN()
	_, _, err = db.PutEvent(ctx, nan)
	assert.Error(t, err, "NaN admit rate is rejected")
}

func testTimesRoundTrip(t *testing.T, url string) {
	ctx := t.Context()
	db := open(t, url)
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		paris = time.FixedZone("UTC+2", 2*3600)
	}

	in := sampleEvent("times")
	in.OpensAt = time.Time{}
	in.ClosesAt = time.Date(2031, 7, 14, 21, 30, 15, 123_456_789, paris)
	in.RedirectURL = ""
	in.SessionTTL = 90*time.Second + 700*time.Millisecond // stored as whole seconds
	stored, _, err := db.PutEvent(ctx, in)
	require.NoError(t, err)

	got, err := db.GetEvent(ctx, "times")
	require.NoError(t, err)
	assert.Equal(t, stored, got)
	assert.True(t, got.OpensAt.IsZero(), "zero time is stored as NULL and read back as zero")
	wantClose := time.Date(2031, 7, 14, 21, 30, 15, 123_000_000, paris).UTC()
	assert.Equal(t, wantClose, got.ClosesAt, "UTC, millisecond precision")
	assert.Equal(t, time.UTC, got.ClosesAt.Location())
	assert.Equal(t, "", got.RedirectURL)
	assert.Equal(t, 90*time.Second, got.SessionTTL)

	// Swap: set OpensAt (before 1970, to check rounding direction), clear ClosesAt.
	in.OpensAt = time.Date(1969, 12, 31, 23, 59, 59, 999_500_000, time.UTC)
	in.ClosesAt = time.Time{}
	stored, created, err := db.PutEvent(ctx, in)
	require.NoError(t, err)
	assert.False(t, created)
	got, err = db.GetEvent(ctx, "times")
	require.NoError(t, err)
	assert.Equal(t, stored, got)
	assert.Equal(t, time.Date(1969, 12, 31, 23, 59, 59, 999_000_000, time.UTC), got.OpensAt)
	assert.True(t, got.ClosesAt.IsZero())
}

func testListOrder(t *testing.T, url string) {
	ctx := t.Context()
	db := open(t, url)

	list, err := db.ListEvents(ctx)
	require.NoError(t, err)
	assert.NotNil(t, list)
	assert.Empty(t, list)

	ids := []string{"b", "A", "a-1", "Z", "a", "é", "10", "9", "a_2"}
	for _, id := range ids {
		_, _, err := db.PutEvent(ctx, sampleEvent(id))
		require.NoError(t, err)
	}
	list, err = db.ListEvents(ctx)
	require.NoError(t, err)
	got := make([]string, len(list))
	for i, e := range list {
		got[i] = e.ID
		assert.Equal(t, "Concert "+e.ID, e.Name)
	}
	want := slices.Clone(ids)
	slices.Sort(want) // byte order
	assert.Equal(t, want, got)
}

func testDelete(t *testing.T, url string) {
	ctx := t.Context()
	db := open(t, url)
	for _, id := range []string{"keep", "drop"} {
		_, _, err := db.PutEvent(ctx, sampleEvent(id))
		require.NoError(t, err)
	}

	deleted, err := db.DeleteEvent(ctx, "drop")
	require.NoError(t, err)
	assert.True(t, deleted)
	_, err = db.GetEvent(ctx, "drop")
	assert.ErrorIs(t, err, event.ErrNotFound)

	deleted, err = db.DeleteEvent(ctx, "drop")
	require.NoError(t, err)
	assert.False(t, deleted, "second delete finds nothing")

	_, err = db.GetEvent(ctx, "keep")
	assert.NoError(t, err, "other events are untouched")

	// Re-creating a deleted event is an insert with a new line.
	_, created, err := db.PutEvent(ctx, sampleEvent("drop"))
	require.NoError(t, err)
	assert.True(t, created)
}

// testNotFound: a missing record is its domain's sentinel, whichever the dialect (the edge:
// interpretError), never another's.
func testNotFound(t *testing.T, url string) {
	ctx := t.Context()
	db := open(t, url)
	_, _, err := db.PutCampaign(ctx, coupon.Campaign{ID: "cp", Stock: 1})
	require.NoError(t, err)

	sentinels := []error{event.ErrNotFound, sale.ErrBookingNotFound, coupon.ErrCampaignNotFound, coupon.ErrEntryNotFound,
		coupon.ErrCouponNotFound, admin.ErrKeyNotFound, sqlstore.ErrNotFound}
	only := func(err, want error) {
		t.Helper()
		require.ErrorIs(t, err, want)
		for _, other := range sentinels {
			if other != want {
				require.NotErrorIs(t, err, other)
			}
		}
	}
	_, err = db.GetEvent(ctx, "nope")
	only(err, event.ErrNotFound)
	_, err = db.GetBooking(ctx, "nope")
	only(err, sale.ErrBookingNotFound)
	_, err = db.BookingByTicket(ctx, "nope", "nope")
	only(err, sale.ErrBookingNotFound)
	_, _, err = db.CancelBooking(ctx, "nope")
	only(err, sale.ErrBookingNotFound)
	_, err = db.GetCampaign(ctx, "nope")
	only(err, coupon.ErrCampaignNotFound)
	_, err = db.ReserveEntries(ctx, "nope", 0, 1)
	only(err, coupon.ErrCampaignNotFound)
	_, err = db.IssueCoupon(ctx, coupon.Coupon{Campaign: "nope", UserID: "u", Code: "C", Entry: 1})
	only(err, coupon.ErrCampaignNotFound)
	_, err = db.CouponEntryOf(ctx, "cp", "nope")
	only(err, coupon.ErrEntryNotFound)
	_, err = db.CouponEntryAt(ctx, "cp", 7)
	only(err, coupon.ErrEntryNotFound)
	_, err = db.GetCoupon(ctx, "cp", "nope")
	only(err, coupon.ErrCouponNotFound)
	_, err = db.RevokeAdminKey(ctx, "nope", admin.Root)
	only(err, admin.ErrKeyNotFound)
	_, err = db.AdminKeyByHash(ctx, "nope")
	only(err, admin.ErrKeyNotFound)
	_, err = db.Setting(ctx, "nope")
	only(err, sqlstore.ErrNotFound)
	_, err = db.LoadSnapshot(ctx, "nope")
	only(err, sqlstore.ErrNotFound)
	assert.NoError(t, db.DeleteSnapshot(ctx, "nope"), "deleting an absent snapshot is fine")
}

// testAdminKeyExists: a taken name, or a hash another key has, is admin.ErrKeyExists (the
// driver's unique violation, converted at the edge), also for a revoked key.
func testAdminKeyExists(t *testing.T, url string) {
	ctx := t.Context()
	db := open(t, url)
	key := func(name, hash string) admin.Key {
		return admin.Key{Name: name, KeyHash: hash, Role: admin.RoleOperator, CreatedBy: admin.Root}
	}
	k, err := db.CreateAdminKey(ctx, key("alice", "hash-a"))
	require.NoError(t, err)
	require.Equal(t, "alice", k.Name)
	_, err = db.CreateAdminKey(ctx, key("alice", "hash-b"))
	require.ErrorIs(t, err, admin.ErrKeyExists, "the name (primary key)")
	_, err = db.CreateAdminKey(ctx, key("bob", "hash-a"))
	require.ErrorIs(t, err, admin.ErrKeyExists, "the hash (unique)")
	rv, err := db.RevokeAdminKey(ctx, "alice", admin.Root)
	require.NoError(t, err)
	require.Equal(t, []string{"alice"}, rv.Revoked)
	rv, err = db.RevokeAdminKey(ctx, "alice", admin.Root)
	require.NoError(t, err, "revoking a revoked key changes nothing")
	require.Empty(t, rv.Revoked)
	_, err = db.CreateAdminKey(ctx, key("alice", "hash-c"))
	require.ErrorIs(t, err, admin.ErrKeyExists, "names are not reused")
	keys, err := db.AdminKeys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.False(t, keys[0].RevokedAt.IsZero())
	byHash, err := db.AdminKeyByHash(ctx, "hash-a")
	require.NoError(t, err)
	require.Equal(t, keys[0], byHash)
}

// testAdminKeyLineage: a revocation takes every key minted by the revoked one, directly or
// through keys it minted, in one step; a named key revokes only its own lineage; a revoked or
// unknown key mints nothing (issue 20, item 8: keys a key minted outlived its revocation).
func testAdminKeyLineage(t *testing.T, url string) {
	ctx := t.Context()
	db := open(t, url)
	mint := func(name, by string, role admin.Role) error {
		_, err := db.CreateAdminKey(ctx, admin.Key{Name: name, KeyHash: "hash-" + name, Role: role, CreatedBy: by})
		return err
	}
	require.NoError(t, mint("ka", admin.Root, admin.RoleKeyAdmin))
	require.NoError(t, mint("kb", admin.Root, admin.RoleKeyAdmin))
	require.NoError(t, mint("ka-ops", "ka", admin.RoleOperator))
	require.NoError(t, mint("ka-sub", "ka", admin.RoleKeyAdmin))
	require.NoError(t, mint("ka-sub-ro", "ka-sub", admin.RoleReadOnly))
	require.NoError(t, mint("kb-ops", "kb", admin.RoleOperator))
	require.ErrorIs(t, mint("x", "nobody", admin.RoleReadOnly), admin.ErrActorRevoked)

	_, err := db.RevokeAdminKey(ctx, "kb-ops", "ka")
	require.ErrorIs(t, err, admin.ErrNotInLineage, "another key admin's key")
	_, err = db.RevokeAdminKey(ctx, "kb", "ka")
	require.ErrorIs(t, err, admin.ErrNotInLineage, "another key admin")
	rv, err := db.RevokeAdminKey(ctx, "ka-sub-ro", "ka")
	require.NoError(t, err)
	require.Equal(t, []string{"ka-sub-ro"}, rv.Revoked, "a key of its lineage, two mints down")

	rv, err = db.RevokeAdminKey(ctx, "ka", admin.Root)
	require.NoError(t, err)
	require.Equal(t, []string{"ka", "ka-ops", "ka-sub"}, rv.Revoked, "the key and the live keys it minted")
	require.Empty(t, rv.Untraced)
	require.ErrorIs(t, mint("late", "ka-sub", admin.RoleReadOnly), admin.ErrActorRevoked, "a revoked key mints nothing")
	_, err = db.RevokeAdminKey(ctx, "ka-ops", "ka-sub")
	require.ErrorIs(t, err, admin.ErrActorRevoked, "nor revokes")
	keys, err := db.AdminKeys(ctx)
	require.NoError(t, err)
	live := map[string]bool{}
	for _, k := range keys {
		live[k.Name] = k.Live()
	}
	require.Equal(t, map[string]bool{"ka": false, "ka-ops": false, "ka-sub": false, "ka-sub-ro": false, "kb": true, "kb-ops": true}, live)
	rv, err = db.RevokeAdminKey(ctx, "kb", "kb")
	require.NoError(t, err, "a key admin revokes itself")
	require.Equal(t, []string{"kb", "kb-ops"}, rv.Revoked)
}

// testAdminKeyMintRacesRevoke: a key minting a successor while its minter is revoked never
// leaves a live key whose minter is revoked: the mint and the revocation are serialised, so
// either the mint sees its minter revoked or the revocation sees the new key.
func testAdminKeyMintRacesRevoke(t *testing.T, url string) {
	ctx := t.Context()
	db := open(t, url)
	for i := range 20 {
		p, c, g := fmt.Sprintf("p%d", i), fmt.Sprintf("c%d", i), fmt.Sprintf("g%d", i)
		_, err := db.CreateAdminKey(ctx, admin.Key{Name: p, KeyHash: "h" + p, Role: admin.RoleKeyAdmin, CreatedBy: admin.Root})
		require.NoError(t, err)
		_, err = db.CreateAdminKey(ctx, admin.Key{Name: c, KeyHash: "h" + c, Role: admin.RoleKeyAdmin, CreatedBy: p})
		require.NoError(t, err)
		var wg sync.WaitGroup
		var mintErr, revokeErr error
		wg.Go(func() {
			_, mintErr = db.CreateAdminKey(ctx, admin.Key{Name: g, KeyHash: "h" + g, Role: admin.RoleReadOnly, CreatedBy: c})
		})
		wg.Go(func() { _, revokeErr = db.RevokeAdminKey(ctx, p, admin.Root) })
		wg.Wait()
		require.NoError(t, revokeErr)
		if mintErr != nil {
			require.ErrorIs(t, mintErr, admin.ErrActorRevoked)
			continue
		}
		k, err := db.AdminKeyByHash(ctx, "h"+g)
		require.NoError(t, err)
		require.False(t, k.Live(), "round %d: the key minted meanwhile is revoked with its minter's minter", i)
	}
}

// TestAdminRolesMigration: migration 00034 gives the keys minted before roles the operator
// role and reads who minted each from the audit trail's admin_key.create entries (none when
// the trail does not name the minter), so that revoking a key also takes the keys it minted
// before roles existed. On both databases.
func TestAdminRolesMigration(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			url := b.url(t)
			old, err := sqlstore.OpenAt(ctx, url, 33)
			require.NoError(t, err)
			insert := `INSERT INTO admin_keys (name, key_hash, created_at) VALUES (?, ?, ?)`
			var at any = time.Now().UnixMilli()
			if old.Dialect() == sqlstore.DialectPostgres {
				insert, at = `INSERT INTO admin_keys (name, key_hash, created_at) VALUES ($1, $2, $3)`, time.Now()
			}
			for _, name := range []string{"alice", "bob", "carol", "dave"} {
				_, err := old.SQL().ExecContext(ctx, insert, name, "hash-"+name, at)
				require.NoError(t, err)
			}
			for _, e := range []admin.AuditEntry{
				{Admin: "root", Action: "admin_key.create", After: `{"key_hash":"hash-alice","name":"alice"}`},
				{Admin: "alice", Action: "admin_key.create", After: `{"key_hash":"hash-bob","name":"bob"}`},
				{Admin: "", Action: "admin_key.create", After: `{"key_hash":"hash-carol","name":"carol"}`}, // an actor lost
				{Admin: "root", Action: "event.put", EventID: "alice", After: `{"name":"alice"}`},
			} {
				e.Address = "127.0.0.1"
				_, err := old.AddAudit(ctx, e)
				require.NoError(t, err)
			}
			require.NoError(t, old.Close())

			db := open(t, url)
			keys, err := db.AdminKeys(ctx)
			require.NoError(t, err)
			by := map[string]string{}
			for _, k := range keys {
				require.Equal(t, admin.RoleOperator, k.Role, k.Name)
				by[k.Name] = k.CreatedBy
			}
			require.Equal(t, map[string]string{"alice": "root", "bob": "alice", "carol": "", "dave": ""}, by)
			rv, err := db.RevokeAdminKey(ctx, "alice", admin.Root)
			require.NoError(t, err)
			require.Equal(t, []string{"alice", "bob"}, rv.Revoked)
			require.Equal(t, []string{"carol", "dave"}, rv.Untraced, "the live keys no minting link reaches are named")
			_, err = db.SQL().ExecContext(ctx, `UPDATE admin_keys SET role = 'root' WHERE name = 'dave'`)
			require.Error(t, err, "a named key's role is one of the three")
		})
	}
}

// TestAdminKeyEvents: a key's events (admin.Scope) are kept and read back as minted, a key of
// every event (minted before migration 00043 too) reads nil, and a column that does not read
// as a list of events fails the key's read rather than making it a key of every event. On
// both databases.
func TestAdminKeyEvents(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			url := b.url(t)
			old, err := sqlstore.OpenAt(ctx, url, 42)
			require.NoError(t, err)
			_, err = old.CreateAdminKey(ctx, admin.Key{Name: "before", KeyHash: "h-before", Role: admin.RoleOperator, CreatedBy: admin.Root})
			require.Error(t, err, "version 42 has no events column: this build's writes need 00043")
			insert := `INSERT INTO admin_keys (name, key_hash, role, created_by, created_at) VALUES (?, ?, 'operator', 'root', ?)`
			var at any = time.Now().UnixMilli()
			if old.Dialect() == sqlstore.DialectPostgres {
				insert, at = `INSERT INTO admin_keys (name, key_hash, role, created_by, created_at) VALUES ($1, $2, 'operator', 'root', $3)`, time.Now()
			}
			_, err = old.SQL().ExecContext(ctx, insert, "before", "h-before", at)
			require.NoError(t, err)
			require.NoError(t, old.Close())

			db := open(t, url)
			k, err := db.AdminKeyByHash(ctx, "h-before")
			require.NoError(t, err)
			require.Nil(t, k.Events, "a key minted before scopes acts on every event")
			_, err = db.CreateAdminKey(ctx, admin.Key{Name: "shop", KeyHash: "h-shop", Role: admin.RoleHealthReporter, CreatedBy: admin.Root, Events: admin.Scope{"ga", "vip"}})
			require.NoError(t, err)
			_, err = db.CreateAdminKey(ctx, admin.Key{Name: "all", KeyHash: "h-all", Role: admin.RoleReadOnly, CreatedBy: admin.Root})
			require.NoError(t, err)
			k, err = db.AdminKeyByHash(ctx, "h-shop")
			require.NoError(t, err)
			require.Equal(t, admin.Scope{"ga", "vip"}, k.Events)
			keys, err := db.AdminKeys(ctx)
			require.NoError(t, err)
			got := map[string]admin.Scope{}
			for _, k := range keys {
				got[k.Name] = k.Events
			}
			require.Equal(t, map[string]admin.Scope{"before": nil, "shop": {"ga", "vip"}, "all": nil}, got)

			for _, bad := range []string{"null", "{}", "[1]", "not json"} {
				_, err = db.SQL().ExecContext(ctx, `UPDATE admin_keys SET events = '`+bad+`' WHERE name = 'shop'`)
				require.NoError(t, err)
				_, err = db.AdminKeyByHash(ctx, "h-shop")
				require.Error(t, err, "events %s: the key fails, it does not act on every event", bad)
			}
		})
	}
}

func testSettingOrInitConcurrent(t *testing.T, url string) {
	ctx := t.Context()
	db := open(t, url)

	const n = 20
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		vals  = make([]string, n)
		errs  = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			vals[i], errs[i] = db.SettingOrInit(ctx, "signing_key", fmt.Sprintf("init-%d", i))
		})
	}
	close(start)
	wg.Wait()

	for i := range n {
		require.NoError(t, errs[i])
	}
	winner := vals[0]
	assert.Regexp(t, `^init-\d+$`, winner)
	for i := range n {
		assert.Equal(t, winner, vals[i], "caller %d", i)
	}
	got, err := db.Setting(ctx, "signing_key")
	require.NoError(t, err)
	assert.Equal(t, winner, got)

	// A later init never replaces the stored value.
	again, err := db.SettingOrInit(ctx, "signing_key", "other")
	require.NoError(t, err)
	assert.Equal(t, winner, again)
}

func testSnapshots(t *testing.T, url string) {
	ctx := t.Context()
	db := open(t, url)

	all := make([]byte, 256*4)
	for i := range all {
		all[i] = byte(i)
	}
	require.NoError(t, db.SaveSnapshot(ctx, "line", all))
	got, err := db.LoadSnapshot(ctx, "line")
	require.NoError(t, err)
	assert.True(t, bytes.Equal(all, got), "binary round trip")

	require.NoError(t, db.SaveSnapshot(ctx, "line", []byte("v2")), "upsert")
	got, err = db.LoadSnapshot(ctx, "line")
	require.NoError(t, err)
	assert.Equal(t, []byte("v2"), got)

	require.NoError(t, db.SaveSnapshot(ctx, "other", nil))
	got, err = db.LoadSnapshot(ctx, "other")
	require.NoError(t, err)
	assert.NotNil(t, got)
	assert.Empty(t, got, "an empty snapshot is not absent")

	require.NoError(t, db.DeleteSnapshot(ctx, "line"))
	_, err = db.LoadSnapshot(ctx, "line")
	assert.ErrorIs(t, err, sqlstore.ErrNotFound)
	_, err = db.LoadSnapshot(ctx, "other")
	assert.NoError(t, err, "other snapshots are untouched")
}

func migrationState(t *testing.T, db *sqlstore.DB) (rows, maxVersion int64) {
	t.Helper()
	err := db.SQL().QueryRowContext(t.Context(),
		`SELECT COUNT(*), MAX(version_id) FROM goose_db_version`).Scan(&rows, &maxVersion)
	require.NoError(t, err)
	return rows, maxVersion
}

func testReopen(t *testing.T, url string) {
	ctx := t.Context()
	db, err := sqlstore.Open(ctx, url)
	require.NoError(t, err)
	stored, _, err := db.PutEvent(ctx, sampleEvent("persisted"))
	require.NoError(t, err)
	require.NoError(t, db.SaveSnapshot(ctx, "line", []byte("state")))
	rows, version := migrationState(t, db)
	assert.Positive(t, version)
	require.NoError(t, db.Close())
	require.NoError(t, db.Close(), "Close is idempotent")

	for range 2 {
		db := open(t, url)
		gotRows, gotVersion := migrationState(t, db)
		assert.Equal(t, rows, gotRows, "no migration re-applied")
		assert.Equal(t, version, gotVersion)
		got, err := db.GetEvent(ctx, "persisted")
		require.NoError(t, err)
		assert.Equal(t, stored, got)
		snap, err := db.LoadSnapshot(ctx, "line")
		require.NoError(t, err)
		assert.Equal(t, []byte("state"), snap)
		require.NoError(t, db.Close())
	}
}

func testConcurrentOpen(t *testing.T, fresh string) {
	// fresh has never been opened: the concurrent first opens must not race on the schema.
	const n = 3
	dbs := make([]*sqlstore.DB, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { dbs[i], errs[i] = sqlstore.Open(t.Context(), fresh) })
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		t.Cleanup(func() { assert.NoError(t, dbs[i].Close()) })
	}
	for i := range n {
		_, _, err := dbs[i].PutEvent(t.Context(), sampleEvent(fmt.Sprintf("e%d", i)))
		require.NoError(t, err)
	}
	list, err := dbs[0].ListEvents(t.Context())
	require.NoError(t, err)
	assert.Len(t, list, n)
	rows, _ := migrationState(t, dbs[0])
	rows1, _ := migrationState(t, dbs[1])
	assert.Equal(t, rows, rows1)
}

// TestSQLiteURLForms opens SQLite through each accepted spelling of its URL.
func TestSQLiteURLForms(t *testing.T) {
	dir := t.TempDir()
	cases := []struct{ name, url, file string }{
		{"plain path", filepath.Join(dir, "plain.db"), filepath.Join(dir, "plain.db")},
		{"nested path is created", filepath.Join(dir, "a", "b", "nested.db"), filepath.Join(dir, "a", "b", "nested.db")},
		{"sqlite absolute", "sqlite://" + filepath.Join(dir, "abs.db"), filepath.Join(dir, "abs.db")},
		{"sqlite opaque", "sqlite:" + filepath.Join(dir, "opaque.db"), filepath.Join(dir, "opaque.db")},
		{"sqlite with query", "sqlite:" + filepath.Join(dir, "q.db") + "?_pragma=synchronous(NORMAL)", filepath.Join(dir, "q.db")},
		{"file URI", "file:" + filepath.Join(dir, "uri.db") + "?mode=rwc", filepath.Join(dir, "uri.db")},
		{"odd characters", filepath.Join(dir, "we?ird #100%.db"), filepath.Join(dir, "we?ird #100%.db")},
		{"memory", ":memory:", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file, ok := sqlstore.SQLiteFile(c.url)
			assert.Equal(t, c.file != "", ok)
			assert.Equal(t, c.file, file)
			db := open(t, c.url)
			assert.Equal(t, sqlstore.DialectSQLite, db.Dialect())
			require.NoError(t, db.Ping(t.Context()))
			_, created, err := db.PutEvent(t.Context(), sampleEvent("x"))
			require.NoError(t, err)
			assert.True(t, created)
			if c.file != "" {
				assert.FileExists(t, c.file)
				var mode string
				require.NoError(t, db.SQL().QueryRowContext(t.Context(), `PRAGMA journal_mode`).Scan(&mode))
				assert.Equal(t, "wal", mode)
			}
		})
	}
}

// TestPostgresPoolKeepsConnections: after a burst that used every connection of the pool, the
// connections stay open for the next one (none closed for being idle beyond a smaller idle
// limit, which under a sale's bursts made every booking dial again and wait).
func TestPostgresPoolKeepsConnections(t *testing.T) {
	db := open(t, sqltest.Postgres(t))
	requests, _ := sqlstore.PostgresPools(sqlstore.DefaultPostgresConns)
	for burst := range 2 {
		var conns []*sql.Conn
		for range requests {
			c, err := db.SQL().Conn(t.Context())
			require.NoError(t, err)
			require.NoError(t, c.PingContext(t.Context()))
			conns = append(conns, c)
		}
		for _, c := range conns {
			require.NoError(t, c.Close())
		}
		st := db.SQL().Stats()
		require.Zero(t, st.MaxIdleClosed, "burst %d: connections closed after the burst", burst+1)
		require.Equal(t, requests, st.Idle, "burst %d", burst+1)
		require.Equal(t, requests, st.OpenConnections, "burst %d: no connection dialed again", burst+1)
	}
}

// TestLineNumbersHaveTheirOwnPool: with every connection of the main pool taken (bookings
// under a sale's load), the line numbers are still reserved at once: a join or an admission
// step that needs a ceiling does not queue behind the sale.
func TestLineNumbersHaveTheirOwnPool(t *testing.T) {
	db := open(t, sqltest.Postgres(t))
	requests, _ := sqlstore.PostgresPools(sqlstore.DefaultPostgresConns)
	var conns []*sql.Conn
	for range requests {
		c, err := db.SQL().Conn(t.Context())
		require.NoError(t, err)
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	rec, err := db.Reserve(ctx, "busy", 1024, 10)
	require.NoError(t, err, "a reservation waited for the main pool")
	require.Equal(t, int64(10), rec.ServingCeiling)
	require.NoError(t, db.Mark(ctx, "busy", 5, 3))
}

// TestPostgresMaxConns: Options.MaxConns bounds both pools together, split as PostgresPools
// says (the default 24 as 20 and 4); fewer than MinPostgresConns is refused before dialling.
func TestPostgresMaxConns(t *testing.T) {
	for n, want := range map[int][2]int{2: {1, 1}, 6: {5, 1}, 12: {10, 2}, 24: {20, 4}, 100: {96, 4}} {
		r, l := sqlstore.PostgresPools(n)
		assert.Equal(t, want, [2]int{r, l}, "PostgresPools(%d)", n)
	}
	url := sqltest.Postgres(t)
	for _, c := range []struct{ opt, requests, lines int }{{0, 20, 4}, {6, 5, 1}} {
		db, err := sqlstore.OpenWith(t.Context(), url, sqlstore.Options{MaxConns: c.opt})
		require.NoError(t, err)
		assert.Equal(t, c.requests, db.SQL().Stats().MaxOpenConnections, "MaxConns %d: requests", c.opt)
		assert.Equal(t, c.lines, db.LinesSQL().Stats().MaxOpenConnections, "MaxConns %d: the line's numbers", c.opt)
		require.NoError(t, db.Close())
	}
	_, err := sqlstore.OpenWith(t.Context(), url, sqlstore.Options{MaxConns: 1})
	require.ErrorContains(t, err, "at least 2 connections")
}

func TestOpenErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := sqlstore.Open(ctx, "")
	assert.Error(t, err)

	// Port 1 on loopback refuses connections; the error must not leak the password.
	_, err = sqlstore.Open(ctx, "postgres://user:s3cret@127.0.0.1:1/db?sslmode=disable&connect_timeout=2")
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "s3cret")
	assert.False(t, errors.Is(err, sqlstore.ErrNotFound))
}

// TestSQLiteFilesArePrivate: the data file (it holds the admin and token keys) and its WAL
// are created 0600, and an existing world-readable file is made private.
func TestSQLiteFilesArePrivate(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "waitroom.db")
	db := open(t, file)
	_, _, err := db.PutEvent(t.Context(), sampleEvent("private"))
	require.NoError(t, err)
	for _, p := range []string{file, file + "-wal"} {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), p)
	}

	old := filepath.Join(dir, "old.db")
	require.NoError(t, os.WriteFile(old, nil, 0o644))
	require.NoError(t, os.Chmod(old, 0o644)) // whatever the umask
	open(t, old)
	fi, err := os.Stat(old)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

// testPurchaseLimitConcurrent: 12 concurrent bookings of 1 unit by one user, with
// max_per_user 5, confirm exactly 5; the others get a PurchaseLimitError with nothing
// remaining; another user and anonymous tickets are not affected; a booking of 2 with 1 left
// is refused with 1 remaining.
func testPurchaseLimitConcurrent(t *testing.T, url string) {
	ctx := t.Context()
	db := open(t, url)
	e := sampleEvent("capped")
	e.Capacity, e.MaxPerUser = 100, 5
	_, _, err := db.PutEvent(ctx, e)
	require.NoError(t, err)
	const user = "0123456789abcdef0123456789abcdef"
	book := func(ticket, userKey string, qty int64) error {
		_, _, err := db.CreateBooking(ctx, sale.BookingRecord{ID: "bk_" + ticket, Event: "capped", TicketID: ticket,
			HoldID: "h_" + ticket, TokenHash: "x", Quantity: qty, UserKey: userKey})
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, 12)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = book(fmt.Sprintf("t%02d", i), user, 1)
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		var pl *sale.PurchaseLimitError
		switch {
		case err == nil:
			ok++
		case errors.As(err, &pl):
			require.Equal(t, int64(5), pl.Max)
			require.Equal(t, int64(0), pl.Remaining)
			require.ErrorIs(t, err, sale.ErrPurchaseLimit)
		default:
			t.Fatalf("booking: %v", err)
		}
	}
	require.Equal(t, 5, ok)
	_, sold, err := db.Inventory(ctx, "capped")
	require.NoError(t, err)
	require.Equal(t, int64(5), sold, "refused bookings sell nothing")

	require.NoError(t, book("other-1", "fedcba9876543210fedcba9876543210", 4))
	var pl *sale.PurchaseLimitError
	require.ErrorAs(t, book("other-2", "fedcba9876543210fedcba9876543210", 2), &pl)
	require.Equal(t, int64(1), pl.Remaining)
	for i := 0; i < 7; i++ {
		require.NoError(t, book(fmt.Sprintf("anon-%d", i), "", 1), "anonymous tickets are not capped per user")
	}
	b, err := db.GetBooking(ctx, "bk_other-1")
	require.NoError(t, err)
	require.Equal(t, "fedcba9876543210fedcba9876543210", b.UserKey)
}

func testLineNumbers(t *testing.T, url string) {
	ctx := t.Context()
	db := open(t, url)
	rec, err := db.Line(ctx, "ln")
	require.NoError(t, err)
	require.NotZero(t, rec.Generation)
	require.Equal(t, queue.LineRecord{Generation: rec.Generation}, rec)
	again, err := db.Line(ctx, "ln")
	require.NoError(t, err)
	require.Equal(t, rec, again, "a second Line reads the same record")

	r, err := db.Reserve(ctx, "ln", 1000, 40)
	require.NoError(t, err)
	require.Equal(t, int64(1024), r.SeqCeiling, "rounded up to a multiple of queue.SeqAlign")
	require.Equal(t, int64(40), r.ServingCeiling)
	r, err = db.Reserve(ctx, "ln", 10, 20) // a racing instance with older figures
	require.NoError(t, err)
	require.Equal(t, int64(1024), r.SeqCeiling, "ceilings never go down")
	require.Equal(t, int64(40), r.ServingCeiling)
	require.Equal(t, rec.Generation, r.Generation)

	require.NoError(t, db.Mark(ctx, "ln", 500, 30))
	require.NoError(t, db.Mark(ctx, "ln", 400, 35))
	r, err = db.Line(ctx, "ln")
	require.NoError(t, err)
	require.Equal(t, int64(500), r.SeqMark, "marks never go down")
	require.Equal(t, int64(35), r.ServingMark)

	require.Error(t, db.Draw(ctx, "ln", 0, nil))
	require.Error(t, db.Draw(ctx, "ln", 60, []int64{5, 61}), "void numbers past N")
	require.Error(t, db.Draw(ctx, "ln", 60, []int64{9, 8}))
	require.Error(t, db.Draw(ctx, "ln", 60, []int64{0, 8}))
	void := []int64{5, 6, 7, 9, 12, 13, 60}
	require.NoError(t, db.Draw(ctx, "ln", 60, void))
	require.NoError(t, db.Draw(ctx, "ln", 75, nil), "a second draw is ignored")
	r, err = db.Line(ctx, "ln")
	require.NoError(t, err)
	require.Equal(t, int64(60), r.DrawN, "the first draw recorded is kept")
	require.Equal(t, void, r.DrawVoid, "with its void numbers")
	require.Error(t, db.MarkOwed(ctx, "ln", []int64{0, 4}))
	require.NoError(t, db.MarkOwed(ctx, "ln", []int64{70, 61, 62, 63, 64}))
	r, err = db.Line(ctx, "ln")
	require.NoError(t, err)
	require.Equal(t, []int64{61, 62, 63, 64, 70}, r.Owed, "the owed queue at the checkpoint")
	require.NoError(t, db.MarkOwed(ctx, "ln", nil))
	r, err = db.Line(ctx, "ln")
	require.NoError(t, err)
	require.Empty(t, r.Owed)
	r, err = db.Reserve(ctx, "ln", 2000, 50)
	require.NoError(t, err)
	require.Equal(t, int64(60), r.DrawN, "Reserve returns it too")

	other, err := db.Reserve(ctx, "fresh", 1, 1) // Reserve creates a missing record
	require.NoError(t, err)
	require.NotZero(t, other.Generation)
	require.Equal(t, int64(64), other.SeqCeiling)

	_, _, err = db.PutEvent(ctx, sampleEvent("ln"))
	require.NoError(t, err)
	_, err = db.DeleteEvent(ctx, "ln")
	require.NoError(t, err)
	r, err = db.Line(ctx, "ln")
	require.NoError(t, err)
	require.Zero(t, r.SeqCeiling, "a new event of the same id starts a new line")
	require.Zero(t, r.DrawN, "with no draw")
}
