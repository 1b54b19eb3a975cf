package crowd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/waitroom/waitroom/internal/app"
	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/faultproxy"
	"github.com/waitroom/waitroom/internal/redistest"
	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// startScaleOut starts n instances of the scale-out deployment sharing one Redis key prefix
// and one PostgreSQL database, each behind a fault proxy, and returns the proxies (whose
// addresses are the instances' as the users see them). Everything stops at cleanup.
func startScaleOut(t *testing.T, n int) []*faultproxy.Proxy {
	t.Helper()
	rc := redistest.Client(t)
	prefix := redistest.Prefix(t, rc)
	redisURL, dbURL := redistest.URL(), sqltest.Postgres(t)
	var proxies []*faultproxy.Proxy
	for range n {
		base := startApp(t, app.Config{DatabaseURL: dbURL, RedisURL: redisURL, RedisPrefix: prefix})
		p, err := faultproxy.New(strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() }) // before the server's cleanup: cuts held connections
		proxies = append(proxies, p)
	}
	return proxies
}

// TestUsersSurviveAStoppedInstance: push users spread over two instances of one line; once
// the line is moving, one instance stops answering altogether (a proxy holds every byte both
// ways, as SIGSTOP would: connections are accepted, nothing comes back). Its users notice —
// their sockets say nothing and their pings get no pong, their requests time out — and go on
// through the other instance: every user is admitted within a few seconds, none fails.
func TestUsersSurviveAStoppedInstance(t *testing.T) {
	proxies := startScaleOut(t, 2)
	a, b := "http://"+proxies[0].Addr(), "http://"+proxies[1].Addr()

	const users = 60
	cfg := testConfig(users, a, b)
	cfg.Push = true
	cfg.PushSilence = time.Second
	cfg.RequestTimeout = 2 * time.Second
	cfg.MaxActive = 4
	cfg.AdmitRate = 1000
	cfg.Hold = 200 * time.Millisecond // 4 slots: about 20 admissions a second
	cfg.PollScale = 1
	cfg.Deadline = time.Minute

	done := make(chan Report, 1)
	go func() {
		rep, err := Run(context.Background(), cfg, io.Discard)
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		done <- rep
	}()
	// Stop instance a once a few users got in and most have not (asked of b, which stays): they
	// wait in line on either instance, or are still to join.
	eventually.NoError(t, 30*time.Second, "the line to move", func() error {
		var ev struct {
			AdmittedTotal int64 `json:"admitted_total"`
		}
		resp, err := http.Get(b + "/v1/events/ev")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&ev); err != nil {
			return err
		}
		if ev.AdmittedTotal < 8 {
			return fmt.Errorf("admitted %d", ev.AdmittedTotal)
		}
		return nil
	})
	proxies[0].Hold()
	stopped := time.Now()
	var left struct {
		AdmittedTotal int64 `json:"admitted_total"`
	}
	if resp, err := http.Get(b + "/v1/events/ev"); err == nil {
		_ = json.NewDecoder(resp.Body).Decode(&left)
		resp.Body.Close()
	}
	if left.AdmittedTotal > users/2 { // the precondition of the test: most users still to go
		t.Errorf("%d of %d users were admitted before the stop", left.AdmittedTotal, users)
	}
	rep := <-done
	took := time.Since(stopped)
	var summary strings.Builder
	rep.writeSummary(&summary)
	t.Logf("the last user was done %s after instance a stopped\n%s", took.Round(time.Millisecond), summary.String())

	if rep.Admitted != users || rep.Lost != 0 || rep.Failed != 0 || rep.FIFOViolations != 0 {
		t.Fatalf("admitted %d lost %d failed %d fifo %d", rep.Admitted, rep.Lost, rep.Failed, rep.FIFOViolations)
	}
	if rep.PushSilent == 0 || rep.Failovers == 0 {
		t.Errorf("silent sockets %d, failovers %d: the stopped instance's users did not notice", rep.PushSilent, rep.Failovers)
	}
	// Over 30 users still to admit at ~20/s, behind a second of silence and a 2 s timeout.
	if took > 15*time.Second {
		t.Errorf("the crowd took %s to finish after the stop", took)
	}
}
