package redisstore

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/waitroom/waitroom/internal/queue"
)

// TestShortRepliesAreErrors: a reply shorter than its reader expects, or of another type, is an
// error (errShortReply), never a panic of the goroutine reading it.
func TestShortRepliesAreErrors(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	eval := func(script string) *reply {
		return readReply(c.Do(ctx, c.B().Eval().Script(script).Numkeys(0).Build()).ToArray())
	}
	for _, script := range []string{"return {1}", "return {2, 5}", "return {}", "return {'x', 1, 2}", "return {1, 2, 3, 4, 5, 6, 7, 8, 9}"} {
		if _, err := parseTicket("ev", eval(script)); !errors.Is(err, errShortReply) {
			t.Errorf("parseTicket(%s) = %v, want errShortReply", script, err)
		}
	}
	r := eval("return {" + itoa(codeEventNotFound) + "}")
	if _, err := parseTicket("ev", r); !errors.Is(err, queue.ErrEventNotFound) {
		t.Errorf("a code alone maps to its error, got %v", err)
	}
	r = eval("return {0, 1}")
	_ = r.Int(1)
	if r.Int(5); !errors.Is(r.Err(), errShortReply) || !strings.Contains(r.Err().Error(), "value 5 of 2") {
		t.Errorf("reading past the end: %v", r.Err())
	}
}

// TestLuaCodesMirrorGo: the codes every script is given are the table's, by name.
func TestLuaCodesMirrorGo(t *testing.T) {
	c := testClient(t)
	for _, sc := range scriptCodes {
		got, err := c.Do(context.Background(), c.B().Eval().Script(luaCodes+"return "+sc.name).Numkeys(0).Build()).AsInt64()
		if err != nil || got != sc.code {
			t.Errorf("%s = %d, %v; want %d", sc.name, got, err, sc.code)
		}
	}
	seen := map[int64]string{}
	for _, sc := range scriptCodes {
		if other, dup := seen[sc.code]; dup {
			t.Errorf("code %d is both %s and %s", sc.code, other, sc.name)
		}
		seen[sc.code] = sc.name
	}
}

// testClient dials TEST_REDIS_URL (default redis://127.0.0.1:6379); package redistest imports
// this package, so its tests cannot use it.
func testClient(t *testing.T) rueidis.Client {
	t.Helper()
	url := os.Getenv("TEST_REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379"
	}
	c, err := Dial(url)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis at %s: %v", url, err)
		}
		t.Skipf("no redis at %s: %v", url, err)
	}
	t.Cleanup(c.Close)
	return c
}
