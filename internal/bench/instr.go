package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/waitroom/waitroom/internal/redisstore"
)

// instrCalls is how many calls of each script the instructions group counts: under callgrind a
// redis-server runs ~50 times slower, a few thousand calls a second. instrBatch is the joins of
// a batched call it counts (the helper's runs saw ~20 a call under 64 connections).
const (
	instrCalls = 20_000
	instrBatch = 20
)

// instrTargets (group instr, run only when named: it needs valgrind and takes a minute or two):
// the instructions a redis-server executes per script call, counted by callgrind (valgrind
// --tool=callgrind) on a private redis-server, per EVALSHA including its share of the network
// handling at redis-benchmark's pipeline depth 8 (-c 1 -P 8), as docs/scaling.md counts them:
// join.lua anonymous and with a client's joins_per_client (an HTTP join's call), the same per
// join of a batched call of instrBatch (batch.go) with one client and with a new client each
// (a crowd's joins: the bucket's two reads miss), status.lua of a waiting ticket in a line of
// 10,000, and the seed's enter (seed-enter.lua) for scale.
// Counts do not depend on what else the machine does (the same binary and inputs give the same
// count), unlike the times of the other groups. Info lines, no target.
func (e *env) instrTargets(ctx context.Context, rep *Report) {
	const id = "instr"
	vg, err1 := exec.LookPath("valgrind")
	ctl, err2 := exec.LookPath("callgrind_control")
	rs, err3 := exec.LookPath("redis-server")
	if err := errors.Join(err1, err2, err3); err != nil || e.rb == "" {
		rep.add(id, Failed, "needs valgrind, callgrind_control, redis-server and redis-benchmark (Debian: valgrind, redis-server, redis-tools): %v", err)
		return
	}
	dir, err := os.MkdirTemp("", "waitroom-bench-callgrind-")
	if err != nil {
		rep.fail(id, err)
		return
	}
	defer os.RemoveAll(dir)
	addr, err := freePort()
	if err != nil {
		rep.fail(id, err)
		return
	}
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	out := filepath.Join(dir, "callgrind.out")
	srv := exec.Command(vg, "--tool=callgrind", "--callgrind-out-file="+out, rs,
		"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := srv.Start(); err != nil {
		rep.fail(id, err)
		return
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	cfg := e.cfg
	cfg.RedisURL = "redis://127.0.0.1:" + port
	var pe *env
	for deadline := time.Now().Add(60 * time.Second); ; { // valgrind starts slowly
		if pe, err = newEnv(ctx, cfg); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		rep.fail(id, fmt.Errorf("redis-server under callgrind: %w", err))
		return
	}
	defer pe.close()
	pid := strconv.Itoa(srv.Process.Pid)
	dumps := 0
	// count runs calls of sha under redis-benchmark between a zeroing of callgrind's counters
	// and a dump, and returns the instructions per call.
	count := func(sha string, keys, args []string, r, calls int) (float64, error) {
		if b, err := exec.CommandContext(ctx, ctl, "-z", pid).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("callgrind_control -z: %w: %s", err, b)
		}
		cmd := []string{"-h", "127.0.0.1", "-p", port, "-q", "-n", strconv.Itoa(calls), "-c", "1", "-P", "8",
			"-r", strconv.Itoa(r), "evalsha", sha, strconv.Itoa(len(keys))}
		cmd = append(append(cmd, keys...), args...)
		if b, err := exec.CommandContext(ctx, pe.rb, cmd...).CombinedOutput(); err != nil || strings.Contains(string(b), "ERR") {
			return 0, fmt.Errorf("redis-benchmark: %v: %s", err, lastLine(b))
		}
		if b, err := exec.CommandContext(ctx, ctl, "-d", pid).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("callgrind_control -d: %w: %s", err, b)
		}
		dumps++
		total, err := callgrindTotal(out + "." + strconv.Itoa(dumps))
		return float64(total) / float64(calls), err
	}
	type script struct {
		name       string
		sha        string
		keys, args []string
		r          int
		joins      int // per call: instrBatch for the batched join, else 1
	}
	joinSHA, err := pe.scriptLoad(ctx, redisstore.ScriptSource("join"))
	var batchSHA, statusSHA, seedSHA, src string
	if err == nil {
		batchSHA, err = pe.scriptLoad(ctx, redisstore.JoinBatchSource())
	}
	if err == nil {
		statusSHA, err = pe.scriptLoad(ctx, redisstore.ScriptSource("status"))
	}
	if err == nil {
		if src, err = pe.baseline("seed-enter.lua"); err == nil {
			seedSHA, err = pe.scriptLoad(ctx, src)
		}
	}
	const waiting = 10_000
	var gen uint32
	if err == nil {
		if gen, err = pe.newEvent(ctx, "instr-status", 1); err == nil {
			e.progress("filling a line of %s under callgrind", thousands(waiting))
			_, err = pe.fill(ctx, "instr-status", waiting+1, 8, 5*time.Minute, nil)
		}
	}
	if err == nil {
		_, err = pe.newEvent(ctx, "instr-join", 1)
	}
	if err != nil {
		rep.fail(id, err)
		return
	}
	jk := pe.store.Keys("instr-join")
	limited := pe.store.JoinKeys("instr-join")
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	// As the store sends them (redisstore.Store.Join): ARGV's trailing empty strings left out.
	limitArgs := []string{"0", "", "127.0.0.1", "1000000000", "10000"}
	newClientArgs := []string{"0", "", "c__rand_int__", "1000000000", "10000"}
	// A join with a challenge (a guarded event's): its id random, in the bucket of used
	// challenges of an hour from now (redisstore.Store.Join's ARGV[7] and 14th key).
	chb := (time.Now().Add(time.Hour).UnixMilli()/60_000 + 1)
	chArgs := append(slices.Clone(limitArgs), "", strconv.FormatInt(chb*60_000, 10)+":ch__rand_int__")
	chKeys := append(slices.Clone(limited), pe.key("{instr-join}:ch:"+strconv.FormatInt(chb, 10)))
	// batch is the ARGV of a batched call of instrBatch joins of args each.
	batch := func(args []string) []string {
		var b []string
		for range instrBatch {
			b = append(append(b, strconv.Itoa(len(args))), args...)
		}
		return b
	}
	for _, s := range []script{
		{"join.lua, anonymous", joinSHA, jk, []string{"0", ""}, 1, 1},
		{"join.lua, joins_per_client counted (an HTTP join's call)", joinSHA, limited, limitArgs, 1, 1},
		{"batched join, anonymous", batchSHA, limited, batch([]string{"0", ""}), 1, instrBatch},
		{"batched join, joins_per_client counted", batchSHA, limited, batch(limitArgs), 1, instrBatch},
		// A crowd: each join from a client of its own (redis-benchmark draws each __rand_int__
		// apart), which the client's bucket has not seen in this window or the one before.
		{"batched join, joins_per_client counted, a new client each", batchSHA, limited, batch(newClientArgs), 1_000_000_000, instrBatch},
		{"batched join, joins_per_client counted, with a challenge", batchSHA, chKeys, batch(chArgs), 1_000_000_000, instrBatch},
		{"status.lua, a waiting ticket of " + thousands(waiting), statusSHA, pe.store.Keys("instr-status"),
			[]string{"0", strconv.FormatUint(uint64(gen), 10), "__rand_int__"}, waiting, 1},
		{"seed-enter.lua", seedSHA, []string{pe.key("{seed-enter}:active"), pe.key("{seed-enter}:waiting")},
			[]string{"1", "__rand_int__", now}, 100_000_000, 1},
	} {
		calls := instrCalls / s.joins
		n, err := count(s.sha, s.keys, s.args, s.r, calls)
		if err != nil {
			rep.fail(id, fmt.Errorf("%s: %w", s.name, err))
			return
		}
		var what string
		if s.joins > 1 {
			n /= float64(s.joins)
			what = fmt.Sprintf("a join (%s calls of %d joins at pipeline depth 8)", thousands(float64(calls)), s.joins)
		} else {
			what = fmt.Sprintf("a call (%s calls at pipeline depth 8)", thousands(float64(calls)))
		}
		e.progress("%s: %.0f instructions %s", s.name, n, what)
		rep.info("instructions: "+s.name, "%s %s, callgrind", thousands(n), what)
	}
}

// callgrindTotal reads the total of the first event (Ir, instructions) of a callgrind dump
// ("totals: N" or, in older formats, "summary: N").
func callgrindTotal(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, p := range []string{"totals:", "summary:"} {
			if v, ok := strings.CutPrefix(line, p); ok {
				if f := strings.Fields(v); len(f) > 0 {
					return strconv.ParseInt(f[0], 10, 64)
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no totals", path)
}
