package admin

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRoleAllows(t *testing.T) {
	for _, c := range []struct {
		role, need Role
		ok         bool
	}{
		{RoleReadOnly, RoleReadOnly, true},
		{RoleReadOnly, RoleOperator, false},
		{RoleOperator, RoleReadOnly, true},
		{RoleOperator, RoleKeyAdmin, false},
		{RoleKeyAdmin, RoleOperator, true},
		{RoleKeyAdmin, RoleKeyAdmin, true},
		{RoleKeyAdmin, RoleRoot, false},
		{RoleRoot, RoleKeyAdmin, true},
		{RoleHealthReporter, RoleHealthReporter, true},
		{RoleHealthReporter, RoleReadOnly, false},
		{RoleHealthReporter, RoleOperator, false},
		{RoleReadOnly, RoleHealthReporter, false},
		{RoleOperator, RoleHealthReporter, true},
		{RoleKeyAdmin, RoleHealthReporter, true},
		{RoleRoot, RoleHealthReporter, true},
		{"", RoleReadOnly, false},
		{"admin", RoleReadOnly, false},
	} {
		require.Equal(t, c.ok, c.role.Allows(c.need), "%q allows %q", c.role, c.need)
	}
	for r, named := range map[Role]bool{RoleHealthReporter: true, RoleReadOnly: true, RoleOperator: true, RoleKeyAdmin: true, RoleRoot: false, "": false, "x": false} {
		require.Equal(t, named, r.Named(), r)
	}
}

func TestLineage(t *testing.T) {
	keys := []Key{
		{Name: "a", CreatedBy: Root}, {Name: "a1", CreatedBy: "a"}, {Name: "a11", CreatedBy: "a1"},
		{Name: "b", CreatedBy: Root}, {Name: "old", CreatedBy: ""}, {Name: "a2", CreatedBy: "a"},
	}
	require.Equal(t, []string{"a", "a1", "a11", "a2"}, Lineage(keys, "a"))
	require.Equal(t, []string{"a1", "a11"}, Lineage(keys, "a1"))
	require.Equal(t, []string{"b"}, Lineage(keys, "b"))
	require.Equal(t, []string{"old"}, Lineage(keys, "old"), "nothing names an unknown minter")
	require.Equal(t, []string{Root, "a", "a1", "a11", "a2", "b", "old"}, Lineage(keys, Root), "root's is every key")
}

// TestScope: a nil scope allows every call; a scope allows a call on one of its events and
// nothing else, not even a call that names no event; Within orders scopes as minting does.
func TestScope(t *testing.T) {
	var every Scope
	some := Scope{"ga", "vip"}
	require.True(t, every.Allows("ga"))
	require.True(t, every.Allows(""))
	require.True(t, some.Allows("vip"))
	require.False(t, some.Allows("other"))
	require.False(t, some.Allows(""), "a call that names no event fails closed")
	require.True(t, every.Within(nil))
	require.True(t, every.Within(some))
	require.False(t, some.Within(nil))
	require.True(t, some.Within(Scope{"vip"}))
	require.False(t, some.Within(Scope{"vip", "x"}))
}
