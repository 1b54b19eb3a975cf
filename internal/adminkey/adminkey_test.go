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

	ops, err := keys.Create(ctx, root, "ops", admin.RoleOperator)
	require.NoError(t, err)
	a, err := keys.Check(ctx, ops)
	require.NoError(t, err)
	require.Equal(t, adminkey.Actor{Name: "ops", Role: admin.RoleOperator}, a)
	for _, bad := range []string{"", "wrong", "eyJhbGciOiJIUzI1NiJ9.e30.x", ops + "x", "wr_" + ops[4:] + "A"} {
		_, err := keys.Check(ctx, bad)
		require.ErrorIs(t, err, adminkey.ErrNoKey, bad)
	}

	_, err = keys.Create(ctx, adminkey.Actor{Name: "ops", Role: admin.RoleOperator}, "boss", admin.RoleKeyAdmin)
	require.ErrorIs(t, err, adminkey.ErrRoleAbove)
	_, err = keys.Create(ctx, root, "god", admin.RoleRoot)
	require.ErrorIs(t, err, adminkey.ErrInvalidRole)
	_, err = keys.Create(ctx, root, adminkey.Root, admin.RoleReadOnly)
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

	ro, err := keys.Create(ctx, root, "ro", admin.RoleReadOnly)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	_, err = keys.Check(ctx, ro)
	require.Error(t, err)
	require.NotErrorIs(t, err, adminkey.ErrNoKey, "a database that does not answer is not a wrong key")
	a, err = keys.Check(ctx, rootKey)
	require.NoError(t, err, "the root key needs no database")
	require.Equal(t, root, a)
}
