package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/internal/challenge"
)

// guardedDifficulty is the bench's challenge difficulty: low, so that the solutions of a
// round (tens of thousands) are found in a second or two before it. The server's check costs
// the same at any difficulty (one HMAC, one SHA-256).
const guardedDifficulty = 8

// guardedTargets: HTTP joins of an event whose joins carry a proof-of-work challenge (and are
// counted against joins_per_client) against HTTP joins of an event without a challenge on the
// same instance, with the same generator, in interleaved rounds (issue 12: >= 0.9).
//
// Every anonymous join is counted against its client's joins_per_client inside join.lua (the
// limit has no off switch); both events lift it to 10^9, since the load comes from one
// address, so it is counted on both sides and never refuses. What the ratio weighs is then
// what the challenge adds to a join: reading and decoding the ~150-byte body, the HMAC and the
// SHA-256 of the check, and the SET NX of the single use inside join.lua. Each guarded join
// carries a challenge of its own, issued with the instance's key and solved before the round
// (outside the timed part); a round that used them all would count its further joins as errors.
//
// Two figures, each the median of the rounds' ratios (a round measures the two kinds in
// alternating slices of a second or so, so that a drift of the machine's load weighs on both
// alike):
//
//   - throughput: joins/s, guarded against unguarded, with the load generator on the same
//     machine, as the http/join line measures. The verdict reads it (issue 12: "HTTP join with
//     the limits and the challenge on >= 0.9x HTTP join without them").
//   - CPU: joins per CPU-second of the instance and Redis together (their CPU time over each
//     measurement, /proc/PID/stat and INFO cpu, over the joins answered), guarded against
//     unguarded: what a server without the load generator beside it would see, and steadier
//     than the rates on a machine shared with other work. With a Redis shared with others
//     their commands count too (run the bench against a Redis of its own for a clean figure).
func (e *env) guardedTargets(ctx context.Context, rep *Report) {
	const id = "http/join-guarded"
	in, err := e.startInstance(ctx)
	if err != nil {
		rep.fail(id, err)
		return
	}
	defer in.stop()
	const plain, guarded = "plain", "guarded"
	if err := in.putEvent(ctx, plain, 1); err != nil {
		rep.fail(id, err)
		return
	}
	if err := in.putEventJSON(ctx, guarded, fmt.Sprintf(`{"name":"bench","max_active":1,"limits":{"joins_per_client":1000000000},`+
		`"challenge":{"type":"pow","difficulty":%d}}`, guardedDifficulty)); err != nil {
		rep.fail(id, err)
		return
	}
	key, err := challenge.DeriveKey(e.tokenKey)
	if err != nil {
		rep.fail(id, err)
		return
	}
	// Issued here with the instance's key (as its own GET /v1/events/{id}/challenge would) and
	// a longer life, so that a round's challenges are all valid while it runs; for the event's
	// life (its epoch) and difficulty, as the instance checks them.
	issuer, err := challenge.NewIssuer(challenge.Config{Key: key, TTL: 30 * time.Minute})
	if err != nil {
		rep.fail(id, err)
		return
	}
	epoch, err := in.epoch(ctx, guarded)
	if err != nil {
		rep.fail(id, err)
		return
	}
	target := challenge.Target{Event: guarded, Epoch: epoch, Difficulty: guardedDifficulty}
	c := newLoadClient(httpConns)
	defer c.CloseIdleConnections()
	// Ticket 1 of each event takes its slot; every join after it queues.
	if _, _, err := in.join(ctx, c, plain); err != nil {
		rep.fail(id, err)
		return
	}
	first, err := solvedBodies(ctx, issuer, target, 1)
	if err == nil {
		err = postJoin(ctx, c, in.base+"/v1/events/"+guarded+"/tickets", first[0])
	}
	if err != nil {
		rep.fail(id, fmt.Errorf("guarded join: %w", err))
		return
	}

	var pr, gr, ratios, capRatios []float64
	var pres, gres []loadResult
	var pcpu, gcpu []time.Duration // CPU of the instance and Redis per join, per round
	// A round is guardedSlices slices of sliceTime (after sliceWarm each), the two kinds in
	// turn: this machine's speed drifts by up to half within a minute, so a round of one kind
	// and then the other (as the line measured until 2026-12-07) weighed the drift as much as
	// the challenge. Each side's rate is the mean of its slices' rates, its CPU per join that of
	// all its slices' joins.
	sliceTime := max(2*e.cfg.HTTPDuration/guardedSlices, 500*time.Millisecond)
	const sliceWarm = 200 * time.Millisecond
	for round := range e.cfg.Rounds {
		// Enough solved challenges for the round's guarded slices at 1.5 times the fastest rate
		// seen (a generous guess before the first measurement), solved outside the timed part.
		rate := 30_000.0
		if len(pr) > 0 {
			rate = slices.Max(append(slices.Clone(pr), gr...))
		}
		n := int(math.Ceil(1.5*rate*float64(guardedSlices/2)*(sliceWarm+sliceTime).Seconds())) + 1000
		start := time.Now()
		bodies, err := solvedBodies(ctx, issuer, target, n)
		if err != nil {
			rep.fail(id, err)
			return
		}
		e.progress("round %d: %d challenges of difficulty %d issued and solved in %s (outside the timed part)",
			round+1, n, guardedDifficulty, time.Since(start).Round(time.Millisecond))
		var taken atomic.Int64
		next := func() []byte {
			if i := taken.Add(1) - 1; i < int64(len(bodies)) {
				return bodies[i]
			}
			return nil
		}
		// Per side (0 plain, 1 guarded): the slices' results, and the CPU of the instance,
		// Redis and the load generator and the joins answered over them.
		var res [2][]loadResult
		var inst, red, gen [2]time.Duration
		var answered [2]int64
		var idle [2]float64
		for sl := range guardedSlices {
			side := (sl + round) % 2
			load := func() (loadResult, error) {
				return httpLoad(ctx, c, http.MethodPost, in.base+"/v1/events/"+plain+"/tickets", httpConns, sliceWarm, sliceTime)
			}
			if side == 1 {
				load = func() (loadResult, error) {
					return httpLoadBodies(ctx, c, http.MethodPost, in.base+"/v1/events/"+guarded+"/tickets", httpConns, sliceWarm, sliceTime, next)
				}
			}
			i0, err1 := in.cpu()
			r0, err2 := e.redisCPU(ctx)
			g0, m0 := selfCPU(), readMachineCPU()
			r, err := load()
			g1, m1 := selfCPU(), readMachineCPU()
			i1, err3 := in.cpu()
			r1, err4 := e.redisCPU(ctx)
			if err := errors.Join(err, err1, err2, err3, err4); err != nil {
				rep.fail(id, fmt.Errorf("%s joins: %w", [2]string{plain, guarded}[side], err))
				return
			}
			res[side] = append(res[side], r)
			inst[side] += i1 - i0
			red[side] += r1 - r0
			gen[side] += g1 - g0
			answered[side] += r.answered
			idle[side] += m1.idleSince(m0) / (guardedSlices / 2)
		}
		var rt [2]float64
		var cpu [2]time.Duration
		for side, what := range []string{"joins without a challenge", "joins with a challenge"} {
			for _, r := range res[side] {
				rt[side] += r.rate / float64(len(res[side]))
			}
			n := time.Duration(max(answered[side], 1))
			cpu[side] = (inst[side] + red[side]) / n
			e.progress("round %d: %s: %.0f/s (slices %s), p99 %s; instance %s, Redis %s and load generator %s CPU per join; machine %.0f%% idle",
				round+1, what, rt[side], sliceRates(res[side]), p99Of(res[side]), (inst[side] / n).Round(100*time.Nanosecond),
				(red[side] / n).Round(100*time.Nanosecond), (gen[side] / n).Round(100*time.Nanosecond), idle[side]*100)
		}
		pr, pres, pcpu = append(pr, rt[0]), append(pres, res[0]...), append(pcpu, cpu[0])
		gr, gres, gcpu = append(gr, rt[1]), append(gres, res[1]...), append(gcpu, cpu[1])
		ratios = append(ratios, rt[1]/rt[0])
		capRatios = append(capRatios, float64(cpu[0])/float64(max(cpu[1], 1)))
	}
	var errs int64
	for _, r := range append(append([]loadResult{}, pres...), gres...) {
		errs += r.errors
	}
	ratio := median(ratios)
	rep.add(id, holds(ratio >= 0.9 && errs == 0),
		"waitroom serve on Redis, POST /v1/events/{id}/tickets of an event with a proof-of-work challenge (difficulty %d, each join its own solved challenge, single use recorded in join.lua) and joins_per_client counted: %s CPU per join (instance and Redis; rounds %s), %s joins/s, p99 %s (rounds %s) vs joins of an event without a challenge on the same instance: %s CPU per join (rounds %s), %s/s, p99 %s (rounds %s); %d errors; %d keep-alive connections, a round %d alternating slices of %s; joins per CPU-second of the instance and Redis %.2f (rounds %s); throughput (rounds %s) = %.2f (target >= 0.90)",
		guardedDifficulty, medianDuration(gcpu), durations(gcpu), thousands(median(gr)), p99Of(gres), rates(gr),
		medianDuration(pcpu), durations(pcpu), thousands(median(pr)), p99Of(pres), rates(pr), errs, httpConns, guardedSlices, sliceTime,
		median(capRatios), ratioList(capRatios), ratioList(ratios), ratio)
}

// guardedSlices is the slices of a round of http/join-guarded, half of each kind.
const guardedSlices = 10

// sliceRates formats the rates of a side's slices ("18211, 17950, …").
func sliceRates(rs []loadResult) string {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = r.rate
	}
	return rates(xs)
}

// solvedBodies issues n challenges for target and solves them: the bodies of n joins.
func solvedBodies(ctx context.Context, is *challenge.Issuer, target challenge.Target, n int) ([][]byte, error) {
	out := make([][]byte, n)
	now := time.Now()
	for i := range out {
		c, err := is.Issue(target, now)
		if err != nil {
			return nil, err
		}
		sol, err := challenge.Solve(ctx, c.String)
		if err != nil {
			return nil, err
		}
		out[i], _ = json.Marshal(map[string]string{"challenge": c.String, "solution": sol}) // strings: cannot fail
	}
	return out, nil
}

// epoch reads the epoch of event id (event.Event.Epoch, which its challenges are bound to) from
// its public draw: the epoch is the first 16 hex characters of the draw's commitment, SHA-256
// of the seed made when the event was created.
func (in *instance) epoch(ctx context.Context, id string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, in.base+"/v1/events/"+id+"/draw", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var d struct {
		Commitment string `json:"commitment"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != http.StatusOK || len(d.Commitment) < 16 {
		return "", fmt.Errorf("GET /v1/events/%s/draw: %d, no commitment (%v)", id, resp.StatusCode, err)
	}
	return d.Commitment[:16], nil
}

// postJoin sends one join with body and requires a 201.
func postJoin(ctx context.Context, c *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("join: %d %s", resp.StatusCode, b)
	}
	return nil
}

// errNoBody: a guarded round used every solved challenge it had.
var errNoBody = errors.New("no solved challenge left")

// redisCPU is the CPU time Redis has used (INFO cpu: used_cpu_user + used_cpu_sys).
func (e *env) redisCPU(ctx context.Context) (time.Duration, error) {
	s, err := e.client.Do(ctx, e.client.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO cpu %s: %w", k, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// medianDuration is the median of ds, rounded to 0.1 µs.
func medianDuration(ds []time.Duration) time.Duration {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	return time.Duration(median(xs)).Round(100 * time.Nanosecond)
}

// durations formats ds for a report line, in µs.
func durations(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 0, 64) + "µs"
	}
	return strings.Join(parts, ", ")
}

// ratioList formats ratios for a report line ("0.93, 0.97, 0.95").
func ratioList(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(parts, ", ")
}
