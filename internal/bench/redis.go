package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"

	"github.com/waitroom/waitroom/internal/event"
	"github.com/waitroom/waitroom/internal/queue"
	"github.com/waitroom/waitroom/internal/redisstore"
	"github.com/waitroom/waitroom/internal/token"
)

// storeGoroutines is how many goroutines call the store at once in the store targets: a busy
// instance's request handlers, whose calls rueidis pipelines.
const storeGoroutines = 512

var rpsPattern = regexp.MustCompile(`([0-9.]+) requests per second`)

// ceiling runs redis-benchmark on a loaded script exactly as ../shared/bench/redis-ceiling.sh
// does (50 clients, pipeline 32, __rand_int__ drawn below r) and returns the requests per
// second and the Redis time per call (µs, INFO commandstats over the run).
func (e *env) ceiling(ctx context.Context, sha string, keys, args []string, r int) (rps, us float64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := []string{"-h", e.host, "-p", e.port}
	cmd = append(cmd, e.auth...)
	cmd = append(cmd, "-q", "-n", strconv.Itoa(e.cfg.Calls), "-c", "50", "-P", "32", "-r", strconv.Itoa(r),
		"evalsha", sha, strconv.Itoa(len(keys)))
	cmd = append(cmd, keys...)
	cmd = append(cmd, args...)
	before, err := e.evalshaStats(ctx)
	if err != nil {
		return 0, 0, err
	}
	out, err := exec.CommandContext(ctx, e.rb, cmd...).CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("redis-benchmark: %w: %s", err, lastLine(out))
	}
	after, err := e.evalshaStats(ctx)
	if err != nil {
		return 0, 0, err
	}
	m := rpsPattern.FindAllSubmatch(out, -1)
	if len(m) == 0 {
		return 0, 0, fmt.Errorf("redis-benchmark printed no rate: %s", lastLine(out))
	}
	rps, _ = strconv.ParseFloat(string(m[len(m)-1][1]), 64)
	if dc := after.calls - before.calls; dc > 0 {
		us = float64(after.usec-before.usec) / float64(dc)
	}
	if strings.Contains(string(out), "ERR") {
		return rps, us, fmt.Errorf("redis-benchmark: the script failed: %s", lastLine(out))
	}
	return rps, us, nil
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(strings.ReplaceAll(string(b), "\r", "\n"))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

type cmdStat struct{ calls, usec int64 }

// evalshaStats reads INFO commandstats' EVALSHA line.
func (e *env) evalshaStats(ctx context.Context) (cmdStat, error) {
	s, err := e.client.Do(ctx, e.client.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return cmdStat{}, err
	}
	var st cmdStat
	for _, line := range strings.Split(s, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				st.calls = n
			case "usec":
				st.usec = n
			}
		}
	}
	return st, nil
}

// isolated runs one EVALSHA (f) and returns the Redis time it took (µs) from INFO
// commandstats: only a reading in which exactly one EVALSHA ran counts, so that other clients
// of a shared Redis cannot pollute it. It tries up to 30 times, then gives up.
func (e *env) isolated(ctx context.Context, f func() error) (float64, error) {
	for range 30 {
		a, err := e.evalshaStats(ctx)
		if err != nil {
			return 0, err
		}
		if err := f(); err != nil {
			return 0, err
		}
		b, err := e.evalshaStats(ctx)
		if err != nil {
			return 0, err
		}
		if b.calls-a.calls == 1 {
			return float64(b.usec - a.usec), nil
		}
	}
	return 0, errors.New("could not isolate one EVALSHA in INFO commandstats (the Redis is too busy)")
}

// loadRate runs op n times from g goroutines (bounded by limit) and returns calls per second.
func loadRate(ctx context.Context, n, g int, limit time.Duration, op func(ctx context.Context, r *rand.Rand) error) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range g {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
			for ctx.Err() == nil && next.Add(1) <= int64(n) {
				if err := op(ctx, r); err != nil {
					firstErr.CompareAndSwap(nil, err)
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	if err, ok := firstErr.Load().(error); ok && err != nil {
		return 0, err
	}
	if ctx.Err() != nil {
		return 0, fmt.Errorf("%d calls took more than %s", n, limit)
	}
	return float64(n) / el.Seconds(), nil
}

// joinTargets: the Go store's join rate against the ceiling of join.lua, and join.lua's rate
// against seed-enter.lua's, in interleaved rounds.
func (e *env) joinTargets(ctx context.Context, rep *Report) {
	if e.rb == "" {
		rep.add("join/store", Failed, "redis-benchmark not found (Debian: apt-get install redis-tools)")
		rep.add("join/seed", Failed, "redis-benchmark not found (Debian: apt-get install redis-tools)")
		return
	}
	joinSHA, err := e.scriptLoad(ctx, redisstore.ScriptSource("join"))
	if err == nil {
		_, err = e.newEvent(ctx, "ceiling", 1)
	}
	if err == nil {
		_, err = e.newEvent(ctx, "store", 1)
	}
	var seedSHA string
	if err == nil {
		var src string
		if src, err = e.baseline("seed-enter.lua"); err == nil {
			seedSHA, err = e.scriptLoad(ctx, src)
		}
	}
	if err != nil {
		rep.fail("join/store", err)
		rep.fail("join/seed", err)
		return
	}
	ceilKeys := e.store.Keys("ceiling")
	seedKeys := []string{e.key("{seed-enter}:active"), e.key("{seed-enter}:waiting")}
	nowMS := strconv.FormatInt(time.Now().UnixMilli(), 10)
	var ceil, seed, store, ceilUS, seedUS []float64
	steps := []string{"ceiling", "seed", "store"}
	for round := range e.cfg.Rounds {
		for i := range steps {
			step := steps[(i+round)%len(steps)]
			switch step {
			case "ceiling":
				rps, us, err := e.ceiling(ctx, joinSHA, ceilKeys, []string{"0", ""}, 100_000_000)
				if err != nil {
					rep.fail("join/store", err)
					rep.fail("join/seed", err)
					return
				}
				ceil, ceilUS = append(ceil, rps), append(ceilUS, us)
				e.progress("round %d: join.lua under redis-benchmark: %.0f/s, %.1f µs/call in Redis", round+1, rps, us)
			case "seed":
				rps, us, err := e.ceiling(ctx, seedSHA, seedKeys, []string{"1", "__rand_int__", nowMS}, 100_000_000)
				if err != nil {
					rep.fail("join/seed", err)
					return
				}
				seed, seedUS = append(seed, rps), append(seedUS, us)
				e.progress("round %d: seed-enter.lua under redis-benchmark: %.0f/s, %.1f µs/call in Redis", round+1, rps, us)
			case "store":
				rps, err := loadRate(ctx, e.cfg.Calls, storeGoroutines, 3*time.Minute, func(ctx context.Context, _ *rand.Rand) error {
					_, err := e.store.Join(ctx, queue.JoinParams{Event: "store"})
					return err
				})
				if err != nil {
					rep.fail("join/store", err)
					return
				}
				store = append(store, rps)
				e.progress("round %d: Go store joins: %.0f/s", round+1, rps)
			}
		}
	}
	r := median(store) / median(ceil)
	rep.add("join/store", holds(r >= 0.70),
		"Go store, %d goroutines: %s joins/s (rounds %s) vs join.lua under redis-benchmark -c 50 -P 32: %s/s (rounds %s) = %.2f (target >= 0.70)",
		storeGoroutines, thousands(median(store)), rates(store), thousands(median(ceil)), rates(ceil), r)
	r = median(ceil) / median(seed)
	rep.add("join/seed", holds(r >= 1.0),
		"join.lua (anonymous): %s/s vs seed-enter.lua: %s/s (rounds %s), redis-benchmark -P 32, medians of %d = %.2f (target >= 1.00)",
		thousands(median(ceil)), thousands(median(seed)), rates(seed), e.cfg.Rounds, r)
	rep.info("join.lua in Redis", "%.1f µs/call (commandstats, median of the ceiling runs); seed-enter.lua %.1f µs/call", median(ceilUS), median(seedUS))
	rep.info("join ceiling, one Redis", "%s joins/s", thousands(median(ceil)))
	_ = e.client.Do(ctx, e.client.B().Unlink().Key(seedKeys...).Build()).Error()
}

// admitTargets: one admission step of 5,000 against seed-admit.lua on a queue of the same
// length, and against a step of 50.
func (e *env) admitTargets(ctx context.Context, rep *Report) {
	const ev = "admit"
	n := e.cfg.AdmitLine
	err := func() error {
		if _, err := e.newEvent(ctx, ev, 1); err != nil {
			return err
		}
		e.progress("filling a line of %s (the admission target's queue)", thousands(float64(n)))
		// Ticket 1 takes the only slot, so that the n after it queue; then the slots open.
		if _, err := e.fill(ctx, ev, n+1, storeGoroutines, 5*time.Minute, nil); err != nil {
			return err
		}
		_, err := e.store.PutEvent(ctx, event.Event{ID: ev, MaxActive: 100_000_000}.WithDefaults().LineConfig(), 1)
		return err
	}()
	if err != nil {
		rep.fail("admit/seed", err)
		rep.fail("admit/batch", err)
		return
	}
	seedWaiting, seedActive := e.key("{seed-admit}:waiting"), e.key("{seed-admit}:active")
	defer func() { _ = e.client.Do(ctx, e.client.B().Unlink().Key(seedWaiting, seedActive).Build()).Error() }()
	if err := e.uuidQueue(ctx, seedWaiting, n); err != nil {
		rep.fail("admit/seed", err)
		return
	}
	src, err := e.baseline("seed-admit.lua")
	var seedSHA string
	if err == nil {
		seedSHA, err = e.scriptLoad(ctx, src)
	}
	if err != nil {
		rep.fail("admit/seed", err)
		return
	}
	// Warm up: the first call loads admit.lua (EVALSHA, then EVAL on NOSCRIPT).
	if _, err := e.store.Admit(ctx, ev, 1); err != nil {
		rep.fail("admit/batch", err)
		return
	}
	admit := func(k int64) func() error {
		return func() error {
			r, err := e.store.Admit(ctx, ev, k)
			if err == nil && r.Admitted != k {
				err = fmt.Errorf("admitted %d, want %d: the line ran short", r.Admitted, k)
			}
			return err
		}
	}
	seedAdmit := func() error {
		cmd := e.client.B().Evalsha().Sha1(seedSHA).Numkeys(2).Key(seedWaiting, seedActive).
			Arg("5000", strconv.FormatInt(time.Now().UnixMilli(), 10)).Build()
		got, err := e.client.Do(ctx, cmd).AsInt64()
		if err == nil && got != 5000 {
			err = fmt.Errorf("seed-admit.lua moved %d, want 5000", got)
		}
		return err
	}
	// Each reading that another client's EVALSHA spoilt is taken again, and spends the line:
	// stop while a step of 5,050 and the seed's 5,000 are still there to take.
	waiting := func() int64 {
		st, err := e.store.Stats(ctx, ev)
		if err != nil {
			return 0
		}
		return st.Waiting
	}
	seedLeft := func() int64 {
		v, _ := e.client.Do(ctx, e.client.B().Zcard().Key(seedWaiting).Build()).AsInt64()
		return v
	}
	var a5000, a50, s5000 []float64
	for i := range admitReadings {
		if waiting() < 5050 || (i < 5 && seedLeft() < 5000) {
			e.note("admit: the line ran short after %d readings (the Redis was busy: readings with another EVALSHA in them are retaken)", i)
			break
		}
		// Both sizes go first in turn (the seed's long script before them cools the caches),
		// and each reading follows a cheap call of the same event (warm Lua state and keys).
		for j := range 2 {
			k := int64(5000)
			if (i+j)%2 == 1 {
				k = 50
			}
			waiting()
			us, err := e.isolated(ctx, admit(k))
			if err != nil {
				rep.fail("admit/batch", err)
				return
			}
			if k == 5000 {
				a5000 = append(a5000, us)
			} else {
				a50 = append(a50, us)
			}
		}
		if i < 5 {
			us, err := e.isolated(ctx, seedAdmit)
			if err != nil {
				rep.fail("admit/seed", err)
				return
			}
			s5000 = append(s5000, us)
		}
	}
	if len(a5000) < 3 || len(s5000) < 3 {
		rep.fail("admit/seed", errors.New("fewer than 3 readings"))
		rep.fail("admit/batch", errors.New("fewer than 3 readings"))
		return
	}
	m5000, m50, ms := median(a5000), median(a50), median(s5000)
	r := m5000 / ms
	rep.add("admit/seed", holds(r <= 0.10),
		"admit 5,000 of %s waiting: %.0f µs in Redis vs seed-admit.lua 5,000 of %s: %.0f µs (medians of %d/%d, INFO commandstats) = %.4f (target <= 0.10)",
		thousands(float64(n)), m5000, thousands(float64(n)), ms, len(a5000), len(s5000), r)
	r = m5000 / m50
	// Within noise: the medians differ by less than the spread (interquartile range) of the
	// readings of one and the same step of 50, or by less than 5 µs.
	noise := max(5, iqr(a50))
	rep.add("admit/batch", holds(r <= 1.25 || m5000-m50 <= noise),
		"admit 5,000: %.0f µs vs admit 50: %.0f µs in Redis (medians of %d; readings of 50 spread %.0f µs) = %.2f (target <= 1.25, or a difference within the spread)",
		m5000, m50, len(a50), iqr(a50), r)
	rep.info("admit.lua in Redis", "%.0f µs per step, whatever the batch size", median(append(append([]float64(nil), a5000...), a50...)))
}

// uuidQueue fills key with n UUID members scored by milliseconds, as the seed's queue: ZADD
// 1,000 members a command, 16 commands a round trip.
func (e *env) uuidQueue(ctx context.Context, key string, n int) error {
	base := time.Now().UnixMilli()
	var cmds rueidis.Commands
	flush := func() error {
		for _, r := range e.client.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				return err
			}
		}
		cmds = cmds[:0]
		return nil
	}
	for i := 0; i < n; i += 1000 {
		z := e.client.B().Zadd().Key(key).ScoreMember()
		for j := i; j < min(i+1000, n); j++ {
			z = z.ScoreMember(float64(base+int64(j)/100), uuid.NewString())
		}
		cmds = append(cmds, z.Build())
		if len(cmds) == 16 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// admitReadings is the number of readings of each admission step size (the seed's: 5).
const admitReadings = 15

// iqr is the interquartile range of xs (nearest rank).
func iqr(xs []float64) float64 {
	if len(xs) < 4 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)*3/4] - s[len(s)/4]
}

// memoryOf sums MEMORY USAGE (all samples) of keys; absent keys count 0.
func (e *env) memoryOf(ctx context.Context, keys ...string) (int64, error) {
	var total int64
	for len(keys) > 0 {
		batch := keys[:min(len(keys), 1024)]
		keys = keys[len(batch):]
		cmds := make(rueidis.Commands, len(batch))
		for i, k := range batch {
			cmds[i] = e.client.B().MemoryUsage().Key(k).Samples(0).Build()
		}
		for i, r := range e.client.DoMulti(ctx, cmds...) {
			v, err := r.AsInt64()
			if rueidis.IsRedisNil(err) {
				continue
			}
			if err != nil {
				return 0, fmt.Errorf("MEMORY USAGE %s: %w", batch[i], err)
			}
			total += v
		}
	}
	return total, nil
}

// memoryTargets: Redis memory per waiting user, anonymous and named, against the seed's
// queue (a ZSET of UUIDs with millisecond scores) of the same length.
func (e *env) memoryTargets(ctx context.Context, rep *Report) {
	n := e.cfg.Waiting
	seedKey := e.key("{seed-queue}:queue")
	e.progress("building the seed's queue: a ZSET of %s UUIDs", thousands(float64(n)))
	err := e.uuidQueue(ctx, seedKey, n)
	var seedBytes int64
	if err == nil {
		seedBytes, err = e.memoryOf(ctx, seedKey)
	}
	_ = e.client.Do(ctx, e.client.B().Unlink().Key(seedKey).Build()).Error()
	if err != nil {
		rep.fail("memory/anon", err)
		rep.fail("memory/named", err)
		return
	}
	seedPer := float64(seedBytes) / float64(n)

	big, err := e.bigLineOf(ctx)
	var anonBytes int64
	if err == nil {
		anonBytes, err = e.memoryOf(ctx, e.store.Keys(big.event)...)
	}
	if err != nil {
		rep.fail("memory/anon", err)
	} else {
		per := float64(anonBytes) / float64(n)
		rep.add("memory/anon", holds(per <= seedPer),
			"%.3f B per waiting user (%s anonymous; MEMORY USAGE of all the line's keys: %s B) vs the seed's ZSET of UUIDs: %.1f B = %.3f (target <= 1.00)",
			per, thousands(float64(n)), thousands(float64(anonBytes)), seedPer, per/seedPer)
		rep.info("anonymous joins while filling", "%s/s (Go store, %d goroutines, %s in %s)",
			thousands(float64(n)/big.fill.Seconds()), storeGoroutines, thousands(float64(n)), big.fill.Round(time.Millisecond))
	}

	const named = "named"
	if _, err := e.newEvent(ctx, named, 1); err != nil {
		rep.fail("memory/named", err)
		return
	}
	defer func() { _ = e.store.DeleteEvent(ctx, named) }()
	e.progress("filling a line of %s named users (16-byte user keys)", thousands(float64(n)))
	start := time.Now()
	_, err = e.fill(ctx, named, n, storeGoroutines, 10*time.Minute, func(i int64) string {
		return token.UserKey("bench-user-" + strconv.FormatInt(i, 10))
	})
	fillTime := time.Since(start)
	var namedBytes int64
	var users []string
	if err == nil {
		users, err = e.store.UserKeys(ctx, named)
	}
	if err == nil {
		namedBytes, err = e.memoryOf(ctx, append(e.store.Keys(named), users...)...)
	}
	if err != nil {
		rep.fail("memory/named", err)
		return
	}
	per := float64(namedBytes) / float64(n)
	rep.add("memory/named", holds(per <= 0.6*seedPer),
		"%.1f B per waiting user (%s named, 16-byte user keys deduplicated) vs the seed's ZSET of UUIDs: %.1f B = %.2f (target <= 0.60)",
		per, thousands(float64(n)), seedPer, per/seedPer)
	rep.info("named joins while filling", "%s/s (Go store, %d goroutines)", thousands(float64(n)/fillTime.Seconds()), storeGoroutines)
}

// statusTargets: status of a random waiting ticket through the store at a line of
// cfg.Waiting against a line of 1,000, in interleaved rounds.
func (e *env) statusTargets(ctx context.Context, rep *Report) {
	big, err := e.bigLineOf(ctx)
	const small = "small"
	var smallGen uint32
	if err == nil {
		smallGen, err = e.newEvent(ctx, small, 1)
	}
	if err == nil {
		_, err = e.fill(ctx, small, 1001, 64, time.Minute, nil)
	}
	if err != nil {
		rep.fail("status/size", err)
		return
	}
	// Ticket 1 holds the slot; 2..n+1 wait.
	status := func(event string, gen uint32, waiting int) func(context.Context, *rand.Rand) error {
		return func(ctx context.Context, r *rand.Rand) error {
			t, err := e.store.Status(ctx, queue.TicketRef{Event: event, Generation: gen, Number: 2 + r.Int64N(int64(waiting))})
			if err == nil && t.Status != queue.StatusQueued {
				err = fmt.Errorf("ticket %d of %s is %s, not waiting", t.Number, event, t.Status)
			}
			return err
		}
	}
	calls := min(e.cfg.Calls, 300_000)
	var atSmall, atBig []float64
	for round := range e.cfg.Rounds {
		for i := range 2 {
			if (i+round)%2 == 0 {
				rps, err := loadRate(ctx, calls, storeGoroutines, 3*time.Minute, status(small, smallGen, 1000))
				if err != nil {
					rep.fail("status/size", err)
					return
				}
				atSmall = append(atSmall, rps)
				e.progress("round %d: status at 1,000 waiting: %.0f/s", round+1, rps)
			} else {
				rps, err := loadRate(ctx, calls, storeGoroutines, 3*time.Minute, status(big.event, big.gen, e.cfg.Waiting))
				if err != nil {
					rep.fail("status/size", err)
					return
				}
				atBig = append(atBig, rps)
				e.progress("round %d: status at %s waiting: %.0f/s", round+1, thousands(float64(e.cfg.Waiting)), rps)
			}
		}
	}
	r := median(atBig) / median(atSmall)
	rep.add("status/size", holds(r >= 0.60),
		"status of a random ticket via the Go store at %s waiting: %s/s (rounds %s) vs at 1,000 waiting: %s/s (rounds %s) = %.2f (target >= 0.60)",
		thousands(float64(e.cfg.Waiting)), thousands(median(atBig)), rates(atBig), thousands(median(atSmall)), rates(atSmall), r)
	if e.rb != "" {
		sha, err := e.scriptLoad(ctx, redisstore.ScriptSource("status"))
		if err == nil {
			var rps, us float64
			rps, us, err = e.ceiling(ctx, sha, e.store.Keys(big.event),
				[]string{"0", strconv.FormatUint(uint64(big.gen), 10), "__rand_int__"}, e.cfg.Waiting)
			if err == nil {
				rep.info("status ceiling, one Redis", "%s/s (status.lua under redis-benchmark -P 32, %s waiting)", thousands(rps), thousands(float64(e.cfg.Waiting)))
				rep.info("status.lua in Redis", "%.1f µs/call", us)
			}
		}
		if err != nil {
			e.note("status ceiling: %v", err)
		}
	}
}
