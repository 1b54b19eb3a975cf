// Package sqltest gives tests a fresh database to open with sqlstore.Open: a new PostgreSQL
// database on the server of TEST_DATABASE_URL, or a SQLite file in the test's temporary
// directory. Each is removed when the test ends.
package sqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// DefaultPostgresURL is used when TEST_DATABASE_URL is unset.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// PostgresServerURL returns TEST_DATABASE_URL, or DefaultPostgresURL when unset: the server
// (and maintenance database) on which Postgres creates its databases.
func PostgresServerURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultPostgresURL
}

// InCI reports whether the CI environment variable asks for strict mode (set and not "false"
// or "0"): then a missing service fails the test instead of skipping it.
func InCI() bool {
	v := strings.ToLower(strings.TrimSpace(os.Getenv("CI")))
	return v != "" && v != "false" && v != "0"
}

// Postgres creates a fresh database named waitroom_test_<random hex> on the server of
// TEST_DATABASE_URL (default DefaultPostgresURL), registers its removal with t.Cleanup (DROP
// DATABASE ... WITH (FORCE), so connections the test left open do not block it), and returns
// its URL: the server URL with the database name replaced.
//
// If the server cannot be reached within 5 seconds, the test is skipped with a message naming
// the URL, unless CI is set (see InCI), in which case it fails. Any other error fails the test.
// Nothing else on the server is touched.
func Postgres(t testing.TB) string {
	t.Helper()
	server := PostgresServerURL()
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("sqltest: TEST_DATABASE_URL must be a postgres:// URL, got %q", redact(server))
	}

	admin, err := sql.Open("pgx", server)
	if err != nil {
		t.Fatalf("sqltest: open %s: %v", redact(server), err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		if InCI() {
			t.Fatalf("sqltest: PostgreSQL at %s is unreachable (CI is set, so this is a failure): %v", redact(server), err)
		}
		t.Skipf("sqltest: skipping: PostgreSQL at %s is unreachable (set TEST_DATABASE_URL, or run scripts/test.sh to start it): %v", redact(server), err)
	}

	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("sqltest: random name: %v", err)
	}
	name := "waitroom_test_" + hex.EncodeToString(b[:])
	// name is [a-z0-9_] only, so it needs no quoting beyond the identifier quotes.
	if _, err := admin.ExecContext(ctx, `CREATE DATABASE "`+name+`"`); err != nil {
		t.Fatalf("sqltest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		drop, err := sql.Open("pgx", server)
		if err != nil {
			t.Errorf("sqltest: drop database %s: %v", name, err)
			return
		}
		defer drop.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := drop.ExecContext(ctx, `DROP DATABASE IF EXISTS "`+name+`" WITH (FORCE)`); err != nil {
			t.Errorf("sqltest: drop database %s: %v", name, err)
		}
	})

	du := *u
	du.Path = "/" + name
	du.RawPath = ""
	return du.String()
}

// SQLite returns the path of a not yet existing SQLite database file in t.TempDir(), which the
// testing package removes when the test ends.
func SQLite(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "waitroom.db")
}

// redact hides the password of a URL for messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable URL>"
	}
	return u.Redacted()
}
