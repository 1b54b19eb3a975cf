package adminkey_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/waitroom/waitroom/internal/admin"
	"github.com/waitroom/waitroom/internal/adminkey"
	"github.com/waitroom/waitroom/internal/sqlstore"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const rootKey = "the-root-key-0123456789"

// TestCheck: the root key passes without the database; a named key passes while it is live,
// by its role; anything else is ErrNoKey; a database that does not answer is neither a pass
// nor ErrNoKey (the caller answers 503 and counts no failure).
func TestCheck(t *testing.T) {
	ctx := context.Background()
	db, err := sqlstore.Open(ctx, sqltest.SQLite(t))
	require.NoError(t, err)
	keys, err := adminkey.New(adminkey.Config{DB: db, RootKey: rootKey})
	require.NoError(t, err)
	root := adminkey.Actor{Name: adminkey.Root, Role: admin.RoleRoot}

	ops, err := keys.Create(ctx, root, "ops", admin.RoleOperator, nil)
	require.NoError(t, err)
	a, err := keys.Check(ctx, ops)
	require.NoError(t, err)
	require.Equal(t, adminkey.Actor{Name: "ops", Role: admin.RoleOperator}, a)
	for _, bad := range []string{"", "wrong", "eyJhbGciOiJIUzI1NiJ9.e30.x", ops + "x", "wr_" + ops[4:] + "A"} {
		_, err := keys.Check(ctx, bad)
		require.ErrorIs(t, err, adminkey.ErrNoKey, bad)
	}

	_, err = keys.Create(ctx, adminkey.Actor{Name: "ops", Role: admin.RoleOperator}, "boss", admin.RoleKeyAdmin, nil)
	require.ErrorIs(t, err, adminkey.ErrRoleAbove)
	_, err = keys.Create(ctx, root, "god", admin.RoleRoot, nil)
	require.ErrorIs(t, err, adminkey.ErrInvalidRole)
	_, err = keys.Create(ctx, root, adminkey.Root, admin.RoleReadOnly, nil)
	require.ErrorIs(t, err, adminkey.ErrInvalidName)
	_, err = keys.Revoke(ctx, root, adminkey.Root)
	require.ErrorIs(t, err, adminkey.ErrRootKey)
	for _, name := range []string{"ROOT", "\x00", "\xff", "-ops", strings.Repeat("a", 65), ""} {
		_, err = keys.Revoke(ctx, root, name)
		require.ErrorIs(t, err, adminkey.ErrInvalidName, "%q: a name no key can have", name)
	}

	rv, err := keys.Revoke(ctx, root, "ops")
	require.NoError(t, err)
	require.Equal(t, []string{"ops"}, rv.Revoked)
	_, err = keys.Check(ctx, ops)
	require.ErrorIs(t, err, adminkey.ErrNoKey, "revoked")

	ro, err := keys.Create(ctx, root, "ro", admin.RoleReadOnly, nil)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	_, err = keys.Check(ctx, ro)
	require.Error(t, err)
	require.NotErrorIs(t, err, adminkey.ErrNoKey, "a database that does not answer is not a wrong key")
	a, err = keys.Check(ctx, rootKey)
	require.NoError(t, err, "the root key needs no database")
	require.Equal(t, root, a)
}

// TestScope: a key minted for some events carries them, sorted, to every check; a key of some
// events mints keys of those events or some of them only; a scope that is empty, too long,
// repeats an event or names no event id is refused.
func TestScope(t *testing.T) {
	ctx := context.Background()
	db, err := sqlstore.Open(ctx, sqltest.SQLite(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	keys, err := adminkey.New(adminkey.Config{DB: db, RootKey: rootKey})
	require.NoError(t, err)
	root := adminkey.Actor{Name: adminkey.Root, Role: admin.RoleRoot}

	secret, err := keys.Create(ctx, root, "tenant", admin.RoleKeyAdmin, admin.Scope{"vip", "ga"})
	require.NoError(t, err)
	tenant, err := keys.Check(ctx, secret)
	require.NoError(t, err)
	require.Equal(t, adminkey.Actor{Name: "tenant", Role: admin.RoleKeyAdmin, Events: admin.Scope{"ga", "vip"}}, tenant)

	_, err = keys.Create(ctx, tenant, "wider", admin.RoleOperator, nil)
	require.ErrorIs(t, err, adminkey.ErrScopeAbove, "every event is wider than two")
	_, err = keys.Create(ctx, tenant, "other", admin.RoleOperator, admin.Scope{"ga", "other"})
	require.ErrorIs(t, err, adminkey.ErrScopeAbove)
	sub, err := keys.Create(ctx, tenant, "reporter", admin.RoleHealthReporter, admin.Scope{"ga"})
	require.NoError(t, err)
	reporter, err := keys.Check(ctx, sub)
	require.NoError(t, err)
	require.Equal(t, admin.Scope{"ga"}, reporter.Events)

	many := make(admin.Scope, admin.MaxEvents+1)
	for i := range many {
		many[i] = "e" + strings.Repeat("x", i%60) + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	for _, bad := range []admin.Scope{{}, {"ga", "ga"}, {"GA"}, {""}, {"-x"}, {strings.Repeat("a", 65)}, many} {
		_, err = keys.Create(ctx, root, "bad", admin.RoleOperator, bad)
		require.ErrorIs(t, err, adminkey.ErrInvalidEvents, "%q", bad)
	}
	_, err = keys.Create(ctx, root, "most", admin.RoleOperator, many[:admin.MaxEvents])
	require.NoError(t, err, "%d events", admin.MaxEvents)
}
