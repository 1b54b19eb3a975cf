package app_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// TestStrictBodies: every request body takes its member names exactly and once (issue 20, item
// 16: {"MAX_ACTIVE":42} was taken for max_active, and {"Paused":true,"paused":false} chose a
// variant), on the event writes, the merge patch and the sale's bodies alike.
func TestStrictBodies(t *testing.T) {
	base := start(t, app.Config{DatabaseURL: sqltest.SQLite(t)}).srv.URL
	r := putEvent(t, base, "strict", `{"MAX_ACTIVE":42}`)
	require.Equal(t, 422, r.code, r.raw)
	require.Contains(t, str(r, "detail"), `unknown field "MAX_ACTIVE"`)
	require.Equal(t, 400, putEvent(t, base, "strict", `{"max_active":1,"max_active":2}`).code, "a name given twice")
	require.Equal(t, 422, putEvent(t, base, "strict", `{"max_active":1,"limits":{"Joins_Per_Client":1}}`).code)
	require.Equal(t, 201, putEvent(t, base, "strict", `{"max_active":1}`).code)

	p := call(t, base, "PATCH", "/v1/events/strict", adminKey, `{"Paused":true,"paused":false}`)
	require.Equal(t, 422, p.code, p.raw)
	require.Contains(t, str(p, "detail"), `unknown field "Paused"`)
	require.Equal(t, 400, call(t, base, "PATCH", "/v1/events/strict", adminKey, `{"paused":true,"paused":false}`).code)
	require.Equal(t, 422, call(t, base, "PATCH", "/v1/events/strict", adminKey, `{"Max_Active":5}`).code)
	g := call(t, base, "GET", "/v1/events/strict", "", "")
	require.Equal(t, false, g.body["paused"])
	require.EqualValues(t, 1, g.body["max_active"], "nothing of the refused bodies was taken")

	require.Equal(t, 422, call(t, base, "PUT", "/v1/campaigns/c", adminKey, `{"Stock":1}`).code)
	require.Equal(t, 422, call(t, base, "POST", "/v1/events/strict/extend", adminKey, `{"SECONDS":60}`).code)
	require.Equal(t, 422, call(t, base, "POST", "/v1/admin/keys", adminKey, `{"Name":"x"}`).code)
}
