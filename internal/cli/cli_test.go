package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/syncbuf"
)

func TestServeRefusesScaleOutWithoutSharedKeys(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		want []string // substrings of the error; nil = no error
	}{
		{"embedded default", nil, nil, nil},
		{"redis alone", map[string]string{"WAITROOM_REDIS_URL": "redis://127.0.0.1:6379"}, nil,
			[]string{"PostgreSQL URL", "WAITROOM_ADMIN_KEY", "WAITROOM_TOKEN_KEY"}},
		{"redis and database, no keys", map[string]string{"WAITROOM_REDIS_URL": "redis://x", "WAITROOM_DATABASE_URL": "postgres://x/y"}, nil,
			[]string{"WAITROOM_ADMIN_KEY", "WAITROOM_TOKEN_KEY"}},
		{"redis with a sqlite database", map[string]string{"WAITROOM_ADMIN_KEY": "admin-key-0123456789", "WAITROOM_TOKEN_KEY": "token-key-0123456789"},
			[]string{"--redis", "redis://x", "--database", "file.db"}, []string{"PostgreSQL URL"}},
		{"everything", map[string]string{"WAITROOM_ADMIN_KEY": "admin-key-0123456789", "WAITROOM_TOKEN_KEY": "token-key-0123456789"},
			[]string{"--redis", "redis://x", "--database", "postgres://x/y", "--trusted-proxies", "10.0.0.0/8,::1",
				"--allowed-origins", "https://shop.example", "--metrics-addr", "127.0.0.1:0"}, nil},
		{"short admin key", map[string]string{"WAITROOM_ADMIN_KEY": "short"}, nil, []string{"WAITROOM_ADMIN_KEY: must be at least 16 bytes"}},
		{"short identity key", map[string]string{"WAITROOM_IDENTITY_KEY": "short"}, nil, []string{"WAITROOM_IDENTITY_KEY: must be at least 16 bytes"}},
		{"short token key", map[string]string{"WAITROOM_TOKEN_KEY": "short"}, nil, []string{"WAITROOM_TOKEN_KEY: must be at least 16 bytes (it is 5)"}},
		{"short old token key", map[string]string{"WAITROOM_TOKEN_KEY": "0123456789abcdef, short"}, nil, []string{"WAITROOM_TOKEN_KEY: must be at least 16 bytes (key 2 of the list is 5)"}},
		{"bad trusted proxies", nil, []string{"--trusted-proxies", "10.0.0.0/8,nope"}, []string{"--trusted-proxies", "nope"}},
		{"bad allowed origins", nil, []string{"--allowed-origins", "shop.example"}, []string{"--allowed-origins"}},
		{"database without redis", nil, []string{"--database", "postgres://x/y"}, []string{"needs --redis"}},
		{"bad log format", nil, []string{"--log-format", "xml"}, []string{"text or json"}},
		{"stray argument", nil, []string{"now"}, []string{"unexpected arguments"}},
		// Behind Google's external Application Load Balancer (600 s of idle connections).
		{"idle timeouts above a balancer's", nil, []string{"--idle-timeout", "620s", "--busy-idle-timeout", "620s"}, nil},
		{"busy idle timeout above the idle one", map[string]string{"WAITROOM_BUSY_IDLE_TIMEOUT": "620s"}, nil,
			[]string{"--busy-idle-timeout 10m20s is longer than --idle-timeout 2m0s"}},
		{"zero idle timeout", nil, []string{"--idle-timeout", "0"}, []string{"--idle-timeout", "positive duration"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseServe(c.args, io.Discard, io.Discard, env(c.env))
			if c.want == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			var ue usageError
			if !errors.As(err, &ue) {
				t.Fatalf("want a usage error, got %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

func TestServeDefaults(t *testing.T) {
	c, err := parseServe(nil, io.Discard, io.Discard, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.addr != ":8080" || c.data != "waitroom.db" || c.prefix != "wr:" {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestMainExitCodes(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main(nil, &out, &errb); code != 2 {
		t.Errorf("no command: exit %d, want 2", code)
	}
	if code := Main([]string{"bogus"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "unknown command") {
		t.Errorf("unknown command: exit %d, stderr %q", code, errb.String())
	}
	out.Reset()
	if code := Main([]string{"help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "serve") {
		t.Errorf("help: exit %d, stdout %q", code, out.String())
	}
	out.Reset()
	if code := Main([]string{"serve", "--help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "--addr") {
		t.Errorf("serve --help: exit %d, stdout %q", code, out.String())
	}
	if _, err := parseServe([]string{"--help"}, io.Discard, io.Discard, env(nil)); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
	t.Setenv("WAITROOM_REDIS_URL", "redis://127.0.0.1:1")
	t.Setenv("WAITROOM_DATABASE_URL", "")
	t.Setenv("WAITROOM_ADMIN_KEY", "")
	t.Setenv("WAITROOM_TOKEN_KEY", "")
	errb.Reset()
	if code := Main([]string{"serve"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "must share their keys") {
		t.Errorf("scale-out without keys: exit %d, stderr %q", code, errb.String())
	}
}

// TestServeOneProcessPerDataFile: a second embedded serve on the same data file is refused
// (two processes would each admit up to max_active), a start on a busy address touches no data
// file, and the file is free again once the first process stops.
func TestServeOneProcessPerDataFile(t *testing.T) {
	for _, k := range []string{"WAITROOM_REDIS_URL", "WAITROOM_DATABASE_URL", "WAITROOM_ADMIN_KEY", "WAITROOM_TOKEN_KEY", "WAITROOM_ADDR", "WAITROOM_DATA"} {
		t.Setenv(k, "")
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "line.db")
	start := func() (addr string, stop func() error) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel) // a start that fails leaves no serve running
		var logs syncbuf.Buffer
		done := make(chan error, 1)
		go func() { done <- serve(ctx, []string{"--addr", "127.0.0.1:0", "--data", data}, io.Discard, &logs) }()
		re := regexp.MustCompile(`waitroom serving" addr=(\S+)`)
		eventually.NoError(t, 20*time.Second, "serve to be serving", func() error {
			if m := re.FindStringSubmatch(logs.String()); m != nil {
				addr = m[1]
				return nil
			}
			select {
			case err := <-done:
				t.Fatalf("serve ended before serving: %v\n%s", err, logs.String())
			default:
			}
			return fmt.Errorf("logs so far:\n%s", logs.String())
		})
		return addr, func() error { cancel(); return <-done }
	}
	addr, stop := start()

	err := serve(context.Background(), []string{"--addr", "127.0.0.1:0", "--data", data}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "in use by another waitroom serve") {
		t.Fatalf("second serve on the same data file: %v", err)
	}
	// The same file by other names (issue 21): a symlink, a hard link, a path through "..".
	symlink, hardlink := filepath.Join(dir, "alias.db"), filepath.Join(dir, "hard.db")
	if err := os.Symlink(data, symlink); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(data, hardlink); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{symlink, hardlink, filepath.Join(dir, "..", filepath.Base(dir), "line.db")} {
		err := serve(context.Background(), []string{"--addr", "127.0.0.1:0", "--data", name}, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "in use by another waitroom serve") {
			t.Fatalf("second serve on the data file as %s: %v", name, err)
		}
	}
	if entries, _ := filepath.Glob(filepath.Join(dir, "*.lock")); len(entries) > 0 {
		t.Fatalf("lock files left beside the data: %v", entries)
	}

	other := filepath.Join(dir, "other.db")
	if err := serve(context.Background(), []string{"--addr", addr, "--data", other}, io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("serve on a busy address: %v", err)
	}
	if _, err := os.Stat(other); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a start that could not listen created its data file: %v", err)
	}

	if err := stop(); err != nil {
		t.Fatalf("first serve: %v", err)
	}
	_, stop = start() // the lock went with the first process's serve
	if err := stop(); err != nil {
		t.Fatalf("serve after the first stopped: %v", err)
	}
}
