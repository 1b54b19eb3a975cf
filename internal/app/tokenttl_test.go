package app_test

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// TestAdmissionTokensAreShortLived: a session of 300 s gets tokens that end a minute after
// issue (the default TTL), and every status read brings a fresh one.
func TestAdmissionTokensAreShortLived(t *testing.T) {
	in := start(t, app.Config{DatabaseURL: sqltest.SQLite(t)})
	base := in.srv.URL
	require.Equal(t, 201, putEvent(t, base, "ttl", `{"max_active":1,"session_ttl_s":300}`).code)
	j := call(t, base, "POST", "/v1/events/ttl/tickets", "", "")
	require.Equal(t, "ADMITTED", str(j, "status"))
	exp := func(tok string) time.Time {
		t.Helper()
		claims := jwt.MapClaims{}
		_, _, err := jwt.NewParser().ParseUnverified(tok, claims)
		require.NoError(t, err)
		e, err := claims.GetExpirationTime()
		require.NoError(t, err)
		return e.Time
	}
	first := exp(str(j, "admission_token"))
	require.WithinDuration(t, time.Now().Add(app.DefaultTokenTTL), first, 2*time.Second)
	until, err := time.Parse(time.RFC3339, str(j, "admitted_until"))
	require.NoError(t, err)
	require.Greater(t, until.Sub(first), 200*time.Second, "the session runs on; the token does not")
	s := call(t, base, "GET", "/v1/events/ttl/tickets/"+str(j, "ticket_id"), "", "")
	require.NotEqual(t, str(j, "admission_token"), str(s, "admission_token"), "a fresh token with every status read")
	require.False(t, exp(str(s, "admission_token")).Before(first))
}
