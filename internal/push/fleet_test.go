package push

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/eventually"
	"github.com/waitroom/waitroom/internal/queue"
)

// Settings of TestFleetDelivery, from the environment.
const (
	envClients = "WAITROOM_PUSH_CLIENTS" // WebSocket clients (default 1000, 200 with -short)
	envMaxP50  = "WAITROOM_PUSH_MAX_P50_MS"
)

// fleetPhase is one admit_rate of the run: the batch sizes follow from it (three processors
// stepping every 100 ms each take about rate/30 per step).
type fleetPhase struct {
	rate     float64
	until    int64 // move to the next phase once this many are admitted
	batches  int64
	admitted int64   // sum of the batch sizes
	sizes    []int64 // the batch sizes
	onRedis  int64   // batch messages Redis carried for the phase's batches
}

// TestFleetDelivery is the multi-instance harness: three instances on one Redis and one
// PostgreSQL database, N WebSocket clients spread over them, the admission processors of all
// three deciding admissions. It checks that every admission reaches its client by push and
// through the batch messages (none left for the resync to heal), that every instance delivered
// batches decided elsewhere, and that Redis carried exactly one message per admission batch
// whether batches hold ~10 or ~100 tickets. It checks the median delivery latency (the batch's
// store time to the client's receipt) against 100 ms, or WAITROOM_PUSH_MAX_P50_MS, except under
// the race detector, where it only logs it. A batch message later than ResyncGrace (3 s here)
// would show as a resync delivery and fail the test.
func TestFleetDelivery(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 200
	}
	if v := os.Getenv(envClients); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(t, err, envClients)
	}
	maxP50 := 100 * time.Millisecond
	checkLatency := !raceEnabled // the race detector slows every goroutine several times
	if v := os.Getenv(envMaxP50); v != "" {
		checkLatency = true
		ms, err := strconv.Atoi(v)
		require.NoError(t, err, envMaxP50)
		maxP50 = time.Duration(ms) * time.Millisecond
	}

	// The first phase's rate is low enough that a step made up after a stall (up to a second
	// of admit_rate, queue.AdmitLateMax) cannot admit the whole line before the pause below
	// (at 300/s a loaded machine's store had admitted all 1,000 by then, 5 of 12 runs).
	phases := []*fleetPhase{{rate: 100, until: int64(n) / 4}, {rate: 3000, until: int64(n)}}
	// Every batch, by its first ticket number: its phase and size. A batch message names the
	// batch's first number, so what Redis carried is matched to the batches exactly.
	var phase atomic.Int32
	type batchInfo struct {
		phase int32
		size  int64
	}
	var batchMu sync.Mutex
	batches := map[int64]batchInfo{}
	nodes := startFleet(t, fleetOpts{n: 3, admitter: true, hub: Config{ResyncGrace: 3 * time.Second}, onStep: func(event string, r queue.AdmitResult) {
		if event == "fleet" && r.Admitted > 0 {
			batchMu.Lock()
			batches[r.From] = batchInfo{phase.Load(), r.Admitted}
			batchMu.Unlock()
		}
	}})
	ctx := context.Background()
	ev := event.Event{ID: "fleet", MaxActive: int64(n) + 10, AdmitRate: phases[0].rate, OpensAt: time.Now().Add(time.Hour)}
	putEvent(t, nodes[0], ev) // in the pre-queue: nobody is admitted until it opens

	// Join N tickets, spread over the instances.
	ids := make([]string, n)
	work(n, 64, func(i int) {
		tk, err := nodes[i%3].Store.Join(ctx, queue.JoinParams{Event: "fleet"})
		if err == nil {
			ids[i] = nodes[i%3].Tickets.Encode(tk.TicketRef)
		}
	})
	for i, id := range ids {
		require.NotEmpty(t, id, "join %d", i)
	}

	// Connect N clients, client i to instance i%3, and read until "admitted".
	type result struct {
		latency time.Duration
		ok      bool
	}
	results := make([]result, n)
	var connected, admitted atomic.Int64
	conns := make([]*websocket.Conn, n)
	var readers sync.WaitGroup
	start := time.Now()
	work(n, 64, func(i int) {
		dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		ws, _, err := websocket.Dial(dctx, wsURL(nodes[i%3].srv.URL, "fleet", ids[i]), nil)
		if err != nil {
			t.Errorf("client %d: %v", i, err)
			return
		}
		conns[i] = ws
		readers.Go(func() {
			defer ws.CloseNow()
			first := true
			for {
				_, b, err := ws.Read(ctx)
				if err != nil {
					return
				}
				recv := time.Now()
				var m msg
				if json.Unmarshal(b, &m) != nil {
					return
				}
				if first {
					first = false
					connected.Add(1)
				}
				if m.Type == TypeAdmitted {
					results[i] = result{latency: recv.Sub(time.UnixMilli(m.TS)), ok: true}
					admitted.Add(1)
					_ = ws.Close(websocket.StatusNormalClosure, "")
					return
				}
			}
		})
	})
	t.Cleanup(func() {
		for _, ws := range conns {
			if ws != nil {
				_ = ws.CloseNow()
			}
		}
		readers.Wait()
	})
	eventually.True(t, 60*time.Second, "every client's first message", func() bool { return connected.Load() == int64(n) })
	eventually.True(t, 10*time.Second, "the three subscriptions", func() bool {
		return nodes[0].hub.Subscribed("fleet") && nodes[1].hub.Subscribed("fleet") && nodes[2].hub.Subscribed("fleet")
	})
	t.Logf("%d clients connected over 3 instances in %s", n, time.Since(start).Round(time.Millisecond))

	onRedis := rawSubscriber(t, nodes[0].channel("fleet"))
	published := func() int64 {
		var s int64
		for _, nd := range nodes {
			s += nd.hub.Counters().Published
		}
		return s
	}

	// Open the event; after a quarter of the line, raise the rate tenfold (batches ~10x larger).
	start = time.Now()
	ev.OpensAt = time.Time{}
	putEvent(t, nodes[0], ev)
	// The pause follows what the admission steps decided, not what the clients were told (which
	// lags behind it by seconds on a loaded machine).
	storeAdmitted := func() int64 {
		batchMu.Lock()
		defer batchMu.Unlock()
		var s int64
		for _, b := range batches {
			s += b.size
		}
		return s
	}
	eventually.True(t, 60*time.Second, "the first phase", func() bool { return storeAdmitted() >= phases[0].until })
	// Pause admission (back to the pre-queue) so that the rest of the line is surely left for
	// the second phase however slowly this machine runs, then reopen at the higher rate.
	ev.OpensAt = time.Now().Add(time.Hour)
	putEvent(t, nodes[0], ev)
	phase.Store(1) // batches made while the PUT ran count as the first phase's
	require.Less(t, storeAdmitted(), int64(n), "the first phase admitted everyone: lower its rate")
	ev.OpensAt = time.Time{}
	ev.AdmitRate = phases[1].rate
	putEvent(t, nodes[0], ev)
	eventually.True(t, 120*time.Second, "every admission pushed", func() bool { return admitted.Load() == int64(n) })
	elapsed := time.Since(start)
	nbatches := func() int64 {
		batchMu.Lock()
		defer batchMu.Unlock()
		return int64(len(batches))
	}
	eventually.True(t, 10*time.Second, "Redis to carry the last messages", func() bool {
		return onRedis.count() == nbatches() && published() == nbatches()
	})
	batchMu.Lock()
	for _, b := range batches {
		phases[b.phase].batches++
		phases[b.phase].admitted += b.size
		phases[b.phase].sizes = append(phases[b.phase].sizes, b.size)
	}
	for _, from := range onRedis.batchesFrom() {
		b, ok := batches[from]
		require.True(t, ok, "a message for a batch that was never made (from %d)", from)
		phases[b.phase].onRedis++
	}
	batchMu.Unlock()

	// Every admission pushed, through the batch messages.
	var latencies []time.Duration
	for i, r := range results {
		require.True(t, r.ok, "client %d was not told it is admitted", i)
		latencies = append(latencies, r.latency)
	}
	slices.Sort(latencies)
	p50, p99 := latencies[len(latencies)/2], latencies[len(latencies)*99/100]
	var local, remote, resync int64
	for i, nd := range nodes {
		c := nd.hub.Counters()
		t.Logf("instance %d: published %d, received %d, delivered local %d remote %d resync %d, dropped %d",
			i, c.Published, c.Received, c.DeliveredLocal, c.DeliveredRemote, c.DeliveredResync, c.Dropped)
		require.Positive(t, c.DeliveredRemote, "instance %d delivered batches decided elsewhere", i)
		require.Zero(t, c.Dropped)
		local, remote, resync = local+c.DeliveredLocal, remote+c.DeliveredRemote, resync+c.DeliveredResync
	}
	require.Equal(t, int64(n), local+remote+resync)
	require.Zero(t, resync, "admissions left for the resync to heal: a batch message was lost or late")

	require.Positive(t, phases[1].batches, "the second phase made batches")
	median := func(v []int64) int64 { slices.Sort(v); return v[len(v)/2] }
	for i, p := range phases {
		t.Logf("phase %d: admit_rate %g/s, %d batches of %.1f tickets on average (median %d), %d messages on Redis: %.3f messages per batch",
			i+1, p.rate, p.batches, float64(p.admitted)/float64(p.batches), median(p.sizes), p.onRedis, float64(p.onRedis)/float64(p.batches))
		require.Equal(t, p.batches, p.onRedis, "phase %d: one message per batch", i+1)
	}
	// How much larger the second phase's batches get depends on how fast the machine runs the
	// admission steps (under -race on 2 busy cores, tokens pile up in the first phase too), so
	// the size ratio is asserted only in the timed run; one message per batch holds always.
	if checkLatency {
		require.GreaterOrEqual(t, median(phases[1].sizes), 3*median(phases[0].sizes), "the second phase's batches are larger")
	}
	t.Logf("%d admissions pushed in %s: 100%% delivered (local %d, remote %d, resync %d); latency from the batch's store time to receipt p50 %s p99 %s max %s",
		n, elapsed.Round(time.Millisecond), local, remote, resync, p50, p99, latencies[len(latencies)-1])
	if checkLatency {
		require.Less(t, p50, maxP50, "median delivery latency")
	}
}

// work runs f(0..n-1) on up to par goroutines.
func work(n, par int, f func(i int)) {
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range min(par, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				f(i)
			}
		})
	}
	wg.Wait()
}
