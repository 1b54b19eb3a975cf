// Package sqlstore holds the durable records of the service (events, bookings, campaigns and
// their entries and coupons, admin keys and the audit trail, line numbers, settings and
// snapshots) on one of two SQL backends behind a single type:
//
//   - PostgreSQL, through pgx's database/sql driver, for URLs starting with postgres:// or
//     postgresql://;
//   - SQLite, through the pure-Go modernc.org/sqlite driver, for anything else: a file path,
//     a sqlite: URL (sqlite:rel.db, sqlite:///abs/path.db) or a file: URI as understood by
//     SQLite (file:rel.db?mode=rwc).
//
// The schema is created and upgraded by goose migrations embedded in the binary (one folder
// per dialect under migrations/), which [Open] runs before returning.
//
// The records it returns are the domain's (event.Event, sale.BookingRecord,
// coupon.CampaignRecord, coupon.EntryRecord, coupon.Coupon, admin.Key, admin.AuditEntry), and so
// are its errors: rows and driver errors are converted here, at the package's edge
// (interpretError), so no caller needs to know the SQL adapter.
//
// Time representation: on PostgreSQL times are timestamptz; on SQLite they are INTEGER unix
// milliseconds in UTC. On both, times are truncated to whole milliseconds when written and are
// read back in UTC, so a value read back equals (==, not only Equal) what the write methods
// return. NULL stands for "not set" and maps to the zero time.Time.
package sqlstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/waitroom/waitroom/internal/coupon"
	"github.com/waitroom/waitroom/internal/sale"
)

// Dialect names returned by [DB.Dialect].
const (
	DialectPostgres = "postgres"
	DialectSQLite   = "sqlite"
)

//go:embed migrations/postgres/*.sql migrations/sqlite/*.sql
var migrationsFS embed.FS

// sqlitePragmas are applied by the driver to every new SQLite connection:
//   - WAL lets readers of other processes proceed while one writer writes;
//   - busy_timeout (ms) makes a writer wait for the lock held by another process instead of
//     failing at once with SQLITE_BUSY;
//   - foreign_keys enforces REFERENCES clauses that later migrations may add;
//   - _txlock=immediate starts every transaction with BEGIN IMMEDIATE, taking the write lock
//     up front: a deferred transaction that reads then writes could otherwise fail with
//     SQLITE_BUSY (no busy wait is possible on a read-to-write upgrade).
const sqlitePragmas = "_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_txlock=immediate"

// sqliteMigrateMu serialises the first connection and the migrations of SQLite databases opened
// in this process. SQLite
// has no advisory lock that goose could hold across its migration transactions, so two Opens of
// the same fresh file could both try to create the schema; migrations take milliseconds, so one
// process-wide lock is simpler than one per file. (PostgreSQL uses goose's session advisory lock,
// which also covers several processes.)
var sqliteMigrateMu sync.Mutex

// DB is a handle on the durable records. It is safe for concurrent use.
type DB struct {
	sql *sql.DB
	// lines is the pool of the line numbers (lines.go): on PostgreSQL one of its own
	// (PostgresPools), on SQLite sql itself (one connection for everything).
	lines   *sql.DB
	dialect string

	// beforeCommit, when set (tests only: export_test.go), is called by CreateBooking with the
	// booking after every write of its transaction and before the commit.
	beforeCommit func(sale.BookingRecord)
	// afterStockRead, when set (tests only), is called by IssueCoupon with the coupon after its
	// transaction read the campaign's stock (behindTheStock).
	afterStockRead func(coupon.Coupon)

	closeOnce sync.Once
	closeErr  error
}

// Open connects to the database named by url, checks that it answers, and runs the pending
// migrations of its dialect before returning.
//
// url is either a PostgreSQL URL (postgres://user@host:5432/db?sslmode=disable, also
// postgresql://) or, for SQLite, a file path, a sqlite: URL or a file: URI; ":memory:" opens a
// private in-memory database that lives as long as the returned DB. For plain paths and sqlite:
// URLs the parent directory is created (mode 0700) when missing.
//
// SQLite is opened with a single connection (see the comment in the code for why), so a caller
// must not hold a transaction on [DB.SQL] while calling other methods of the same DB.
//
// Errors: a malformed URL, an unreachable server or a failed migration; ctx bounds the
// connection check and the migrations. The URL (which may hold a password) is never included
// in the error. On error nothing stays open.
func Open(ctx context.Context, url string) (*DB, error) {
	return OpenWith(ctx, url, Options{})
}

// Options bound the calls to a PostgreSQL server (SQLite ignores them). A setting the URL
// gives itself (connect_timeout, statement_timeout) wins.
type Options struct {
	// ConnectTimeout bounds each new connection (dial, TLS and start-up): pgx's
	// connect_timeout, rounded up to whole seconds. 0 = none (the caller's context only).
	ConnectTimeout time.Duration
	// StatementTimeout makes the server abort any statement running longer (PostgreSQL's
	// statement_timeout, ms), so that a statement stuck on a lock does not hold a connection
	// after its caller gave up. 0 = none.
	StatementTimeout time.Duration
	// MaxConns bounds the connections the DB holds open to PostgreSQL, both pools together
	// (PostgresPools splits them). 0 = DefaultPostgresConns. SQLite ignores it (one
	// connection). Errors of OpenWith: fewer than MinPostgresConns.
	MaxConns int

	// upTo stops the migrations at that version (tests of a migration: the state before it);
	// 0 = all of them.
	upTo int64
}

// DefaultPostgresConns is the connections one instance holds open to PostgreSQL at most by
// default (Options.MaxConns): 20 for requests and 4 for the line's numbers. Three instances
// take 72 of PostgreSQL's default max_connections of 100; more instances need a smaller
// MaxConns each (serve --database-max-conns) or a larger max_connections.
// MinPostgresConns is the fewest: one connection for each pool.
const (
	DefaultPostgresConns = 24
	MinPostgresConns     = 2
)

// PostgresPools splits n connections (at least MinPostgresConns) into the pool of requests
// (bookings, holds, events, coupons) and the pool of its own that the line's numbers (lines.go)
// are written through, so that a join or an admission step never waits for a connection
// behind the sale's bookings: a sixth of n for the line, at least 1 and at most 4 (a line
// number is reserved once per run of numbers, not per join), the rest for requests. 24 gives
// 20 and 4; 6 gives 5 and 1.
func PostgresPools(n int) (requests, lines int) {
	lines = min(max(n/6, 1), 4)
	return n - lines, lines
}

// OpenWith is Open with calls to PostgreSQL bounded as o says. A server that accepts
// connections and then never answers is not caught by these settings alone: callers pass a
// context with a deadline, and pgx closes the connection when it ends.
func OpenWith(ctx context.Context, url string, o Options) (*DB, error) {
	dialect, driver, dsn, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	if o.MaxConns == 0 {
		o.MaxConns = DefaultPostgresConns
	}
	if o.MaxConns < MinPostgresConns {
		return nil, fmt.Errorf("sqlstore: at least %d connections to PostgreSQL (one for requests, one for the line's numbers), not %d", MinPostgresConns, o.MaxConns)
	}
	reqConns, lineConns := PostgresPools(o.MaxConns)
	migrateDSN := dsn
	if dialect == DialectPostgres {
		// Migrations run without the statement timeout: building an index may take longer.
		migrateDSN = postgresTimeouts(dsn, Options{ConnectTimeout: o.ConnectTimeout})
		dsn = postgresTimeouts(dsn, o)
	}
	if file, ok := SQLiteFile(url); ok && dialect == DialectSQLite {
		if err := privateFile(file); err != nil {
			return nil, fmt.Errorf("sqlstore: %w", err)
		}
	}
	sqlDB, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlstore: open %s: %w", dialect, err)
	}
	switch dialect {
	case DialectSQLite:
		// One pool with a single connection: SQLite allows one writer at a time, and with one
		// connection our own statements queue in database/sql instead of contending for the
		// file lock (no SQLITE_BUSY, no retries) and transactions never interleave. Reads are
		// served by the same connection; the records here are small and rarely written, so the
		// lost read parallelism does not matter. It also makes ":memory:" work, as every
		// connection would otherwise be a separate empty database. The connection is kept
		// forever (no lifetime or idle limit) for the same reason.
		sqlDB.SetMaxOpenConns(1)
		sqlDB.SetMaxIdleConns(1)
		sqlDB.SetConnMaxLifetime(0)
		sqlDB.SetConnMaxIdleTime(0)
	case DialectPostgres:
		// Every connection of the pool stays open while it is used at all: a pool that kept
		// fewer idle than open closed the rest after each burst and dialed them again in the
		// next (a PostgreSQL backend started per connection), so under a sale's load every
		// booking waited for a connection: 180-236 closed per instance in a `crowd --book` run
		// of 20,000 users on 3 instances, 152-242 bookings answered 503 after the 2 s store
		// deadline, none once they stayed open (1 December 2026). Idle ones close after 5 min.
		sqlDB.SetMaxOpenConns(reqConns)
		sqlDB.SetMaxIdleConns(reqConns)
		sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	}
	db := &DB{sql: sqlDB, lines: sqlDB, dialect: dialect}
	if dialect == DialectPostgres {
		if db.lines, err = sql.Open(driver, dsn); err != nil {
			_ = sqlDB.Close()
			return nil, fmt.Errorf("sqlstore: open %s: %w", dialect, err)
		}
		db.lines.SetMaxOpenConns(lineConns)
		db.lines.SetMaxIdleConns(lineConns)
		db.lines.SetConnMaxIdleTime(5 * time.Minute)
	}
	if dialect == DialectSQLite {
		// The first connection to a fresh file switches it to WAL, which needs the file's
		// exclusive lock and can fail with SQLITE_BUSY without the busy timeout applying when
		// another connection (of this or another process) is doing the same; such an Open waits
		// and retries. Within the process the opens are serialised outright.
		sqliteMigrateMu.Lock()
		defer sqliteMigrateMu.Unlock()
	}
	if err := db.connect(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlstore: connect to %s: %w", dialect, err)
	}
	mig := db
	if migrateDSN != dsn {
		m, err := sql.Open(driver, migrateDSN)
		if err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("sqlstore: open %s: %w", dialect, err)
		}
		defer m.Close()
		mig = &DB{sql: m, dialect: dialect}
	}
	if err := mig.migrate(ctx, o.upTo); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqlstore: migrate %s: %w", dialect, err)
	}
	return db, nil
}

// privateFile creates the SQLite file with mode 0600 before SQLite opens it (it holds the
// admin and token keys), and takes group and other access away from an existing one and its
// -wal and -shm files. SQLite gives the -wal and -shm files it creates the database file's
// mode, so they are 0600 too.
func privateFile(file string) error {
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", file, err)
	}
	_ = f.Close()
	for _, p := range []string{file, file + "-wal", file + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			continue // no such file (yet)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(p, fi.Mode().Perm()&0o700); err != nil {
				return fmt.Errorf("make %s private: %w", p, err)
			}
		}
	}
	return nil
}

// SQLiteFile returns the file that dbURL names when it is a SQLite database kept in a file (a
// path, a sqlite: URL or a file: URI), and false for PostgreSQL and in-memory databases. It
// does not touch the file system.
func SQLiteFile(dbURL string) (string, bool) {
	raw := strings.TrimSpace(dbURL)
	lower := strings.ToLower(raw)
	var path, query string
	switch {
	case raw == "", strings.HasPrefix(lower, "postgres://"), strings.HasPrefix(lower, "postgresql://"):
		return "", false
	case strings.HasPrefix(lower, "file:"):
		path, query, _ = strings.Cut(raw[len("file:"):], "?")
		path = strings.TrimPrefix(path, "//") // file:///abs -> /abs
	case strings.HasPrefix(lower, "sqlite:"):
		path, query, _ = strings.Cut(strings.TrimPrefix(raw[len("sqlite:"):], "//"), "?")
	default:
		if raw == ":memory:" {
			return "", false
		}
		return filepath.Clean(raw), true // a plain path is taken as written
	}
	if unescaped, err := url.PathUnescape(path); err == nil {
		path = unescaped
	}
	if path == "" || path == ":memory:" || strings.Contains(strings.ToLower(query), "mode=memory") {
		return "", false
	}
	return filepath.Clean(path), true
}

// parseURL picks the dialect of raw and returns the database/sql driver name and DSN.
func parseURL(raw string) (dialect, driver, dsn string, err error) {
	raw = strings.TrimSpace(raw)
	lower := strings.ToLower(raw)
	switch {
	case raw == "":
		return "", "", "", errors.New("sqlstore: empty database URL")
	case strings.HasPrefix(lower, "postgres://"), strings.HasPrefix(lower, "postgresql://"):
		return DialectPostgres, "pgx", raw, nil
	case strings.HasPrefix(lower, "file:"):
		// Already a SQLite URI: keep it and add our parameters.
		return DialectSQLite, "sqlite", appendQuery(raw, sqlitePragmas), nil
	}

	path, query := raw, ""
	if strings.HasPrefix(lower, "sqlite:") {
		path = raw[len("sqlite:"):]
		// sqlite:///abs/path.db -> /abs/path.db, sqlite://rel.db -> rel.db
		path = strings.TrimPrefix(path, "//")
		if i := strings.IndexByte(path, '?'); i >= 0 {
			path, query = path[:i], path[i+1:]
		}
		if path == "" {
			return "", "", "", errors.New("sqlstore: sqlite URL without a path")
		}
		if unescaped, uerr := url.PathUnescape(path); uerr == nil {
			path = unescaped
		}
	}
	if path == ":memory:" {
		dsn = appendQuery("file::memory:", sqlitePragmas)
		return DialectSQLite, "sqlite", appendQuery(dsn, query), nil
	}
	path = filepath.Clean(path)
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", "", "", fmt.Errorf("sqlstore: create directory of the sqlite database: %w", err)
		}
	}
	// Escape the characters that have a meaning in a SQLite URI; filepath.Clean has already
	// reduced a leading "//" (which would read as an authority) to "/".
	escaped := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	dsn = appendQuery("file:"+escaped, sqlitePragmas)
	return DialectSQLite, "sqlite", appendQuery(dsn, query), nil
}

// postgresTimeouts adds o's connect_timeout (s) and statement_timeout (ms) to a PostgreSQL
// URL that does not set them.
func postgresTimeouts(dsn string, o Options) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn // pgx reports the malformed URL
	}
	q := u.Query()
	if o.ConnectTimeout > 0 && !q.Has("connect_timeout") {
		q.Set("connect_timeout", strconv.FormatInt(int64((o.ConnectTimeout+time.Second-1)/time.Second), 10))
	}
	if o.StatementTimeout > 0 && !q.Has("statement_timeout") {
		q.Set("statement_timeout", strconv.FormatInt(max(1, o.StatementTimeout.Milliseconds()), 10))
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// appendQuery adds the URL query q (without "?") to dsn.
func appendQuery(dsn, q string) string {
	if q == "" {
		return dsn
	}
	if strings.Contains(dsn, "?") {
		return dsn + "&" + q
	}
	return dsn + "?" + q
}

// migrate applies the embedded migrations of the dialect with a goose provider owned by this DB
// (no goose global state, no logging): all of them, or those up to version upTo when > 0.
func (db *DB) migrate(ctx context.Context, upTo int64) error {
	fsys, err := fs.Sub(migrationsFS, "migrations/"+db.dialect)
	if err != nil {
		return err
	}
	opts := []goose.ProviderOption{goose.WithVerbose(false), goose.WithDisableGlobalRegistry(true)}
	var gooseDialect goose.Dialect
	switch db.dialect {
	case DialectPostgres:
		gooseDialect = goose.DialectPostgres
		// A session-level advisory lock (scoped to this database) serialises the migrations of
		// several processes or DBs opening the same database at once; retried every second for
		// up to 5 minutes.
		locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
		if err != nil {
			return err
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	case DialectSQLite:
		gooseDialect = goose.DialectSQLite3 // Open holds sqliteMigrateMu
	}
	provider, err := goose.NewProvider(gooseDialect, db.sql, fsys, opts...)
	if err != nil {
		return err
	}
	// Not provider.Close: it would close db.sql.
	if upTo > 0 {
		_, err = provider.UpTo(ctx, upTo)
		return err
	}
	_, err = provider.Up(ctx)
	return err
}

// sqliteBusyWait bounds how long Open retries a first SQLite connection that fails with
// SQLITE_BUSY (another process converting the same fresh file to WAL), on top of ctx.
const sqliteBusyWait = 10 * time.Second

// connect checks that the database answers; for SQLite it retries SQLITE_BUSY (retryable) for
// up to sqliteBusyWait, as the pragmas applied on connecting can fail that way without waiting.
func (db *DB) connect(ctx context.Context) error {
	err := db.Ping(ctx)
	if db.dialect != DialectSQLite {
		return err
	}
	deadline := time.Now().Add(sqliteBusyWait)
	for delay := 5 * time.Millisecond; retryable(err) && time.Now().Before(deadline); delay = min(2*delay, 200*time.Millisecond) {
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		err = db.Ping(ctx)
	}
	return err
}

// Close closes the connections. It is safe to call more than once; later calls return the
// first call's result.
func (db *DB) Close() error {
	db.closeOnce.Do(func() {
		db.closeErr = db.sql.Close()
		if db.lines != db.sql {
			db.closeErr = errors.Join(db.closeErr, db.lines.Close())
		}
	})
	return db.closeErr
}

// Ping checks that the database answers within ctx.
func (db *DB) Ping(ctx context.Context) error {
	return db.sql.PingContext(ctx)
}

// Dialect returns "postgres" ([DialectPostgres]) or "sqlite" ([DialectSQLite]).
func (db *DB) Dialect() string { return db.dialect }

// SQL returns the underlying pool, for packages that run their own queries. On SQLite it has a
// single connection: release rows and transactions before calling other methods.
func (db *DB) SQL() *sql.DB { return db.sql }

// LinesSQL returns the pool of the line numbers (see PostgresPools), or nil where they share
// SQL's (SQLite).
func (db *DB) LinesSQL() *sql.DB {
	if db.lines == db.sql {
		return nil
	}
	return db.lines
}

// inTx runs f in a transaction, committed when f returns nil and rolled back otherwise; it
// returns f's error, or the commit's.
func (db *DB) inTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// rebind turns the '?' placeholders of query into the dialect's ($1, $2, ... on PostgreSQL).
// Queries in this package never contain '?' in literals.
func (db *DB) rebind(query string) string {
	if db.dialect != DialectPostgres {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 16)
	n := 0
	for i := 0; i < len(query); i++ {
		if query[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(query[i])
	}
	return b.String()
}

// normTime is how a time is stored: UTC, truncated to the millisecond.
func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Millisecond)
}

// timeArg returns the query argument for t: NULL for the zero time, else timestamptz on
// PostgreSQL or unix milliseconds on SQLite.
func (db *DB) timeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	t = normTime(t)
	if db.dialect == DialectSQLite {
		return t.UnixMilli()
	}
	return t
}

// timeCol scans a time column of either dialect (timestamptz, unix milliseconds or NULL) into
// a UTC time with millisecond precision; NULL becomes the zero time.
type timeCol struct{ t *time.Time }

func (c timeCol) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*c.t = time.Time{}
	case time.Time:
		*c.t = normTime(v)
	case int64:
		*c.t = time.UnixMilli(v).UTC()
	default:
		return fmt.Errorf("sqlstore: cannot scan %T into a time", src)
	}
	return nil
}
