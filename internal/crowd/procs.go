package crowd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Several processes (--procs N): a process may open at most so many files (20,000 here, a
// hard limit), and each user waiting on its WebSocket holds one, so a crowd of 50,000 push
// users is more than one process can be. With --procs the command creates the event once,
// then runs N copies of itself (`crowd ... --procs 1`), each with its share of the users, its
// share of --user-addrs (so that the server's limits per client see them as different
// clients) and a user prefix of its own, and merges their reports: counts add up, latencies
// are merged from the processes' histograms, max_active_seen is the largest any process saw
// (each is a lower bound of the server's count, and so is the largest; their sum is not).
// FIFO is checked within each process (an answer is compared with those its own process
// received before). Books, bots and the health probe run in one process only: they are not
// combined with --procs.

// envChild marks a child of --procs: its JSON report carries its histograms (Report.Histograms).
const envChild = "WAITROOM_CROWD_CHILD"

// procShare is user count n split into k shares, the first n%k one larger.
func procShare(n, k, i int) int {
	s := n / k
	if i < n%k {
		s++
	}
	return s
}

// addrShare is process i's part of prefix, split in k: the i-th of k equal runs of its
// addresses (the plan uses at most maxPlanAddrs of them). ok is false when the prefix has
// fewer addresses than k.
func addrShare(p netip.Prefix, k, i int) (netip.Prefix, bool) {
	hostBits := p.Addr().BitLen() - p.Bits()
	bits := 0
	for 1<<bits < k {
		bits++
	}
	if bits > hostBits {
		return netip.Prefix{}, false
	}
	start := offset(p.Masked().Addr(), i<<(hostBits-bits))
	return netip.PrefixFrom(start, p.Bits()+bits), true
}

// runProcs runs cfg over cfg.Procs processes of exe (the crowd command line args of this
// process, to which each child's own flags are appended: the last of a flag wins) and
// returns the merged report.
func runProcs(ctx context.Context, cfg Config, exe string, args []string, stderr io.Writer) (Report, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return Report{}, err
	}
	k := cfg.Procs
	switch {
	case cfg.Book || cfg.Bots.N > 0 || cfg.HealthzProbe > 0:
		return Report{}, fmt.Errorf("--procs does not combine with --book, --bots or --healthz-probe")
	case cfg.Users < k:
		return Report{}, fmt.Errorf("--procs %d needs at least as many users", k)
	}
	// The event, once: the children then find it.
	r := newRunner(cfg)
	err := r.setup(ctx, stderr)
	r.client.CloseIdleConnections()
	if err != nil {
		return Report{}, err
	}
	dir, err := os.MkdirTemp("", "waitroom-crowd-")
	if err != nil {
		return Report{}, err
	}
	defer os.RemoveAll(dir)
	reps := make([]Report, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	var outMu sync.Mutex // the children's progress lines share stderr
	for i := range k {
		own := []string{"--procs", "1", "--users", strconv.Itoa(procShare(cfg.Users, k, i)),
			"--user-prefix", cfg.UserPrefix + "-p" + strconv.Itoa(i), "--json", filepath.Join(dir, strconv.Itoa(i)+".json")}
		if cfg.UserAddrs.IsValid() {
			sub, ok := addrShare(cfg.UserAddrs, k, i)
			if !ok {
				return Report{}, fmt.Errorf("--user-addrs %s has fewer addresses than --procs %d", cfg.UserAddrs, k)
			}
			own = append(own, "--user-addrs", sub.String())
		}
		cmd := exec.CommandContext(ctx, exe, append(append([]string{"crowd"}, args...), own...)...)
		cmd.Env = append(os.Environ(), envChild+"=1")
		cmd.Stderr = &prefixWriter{mu: &outMu, w: stderr, prefix: fmt.Sprintf("[%d] ", i+1)}
		if err := cmd.Start(); err != nil {
			return Report{}, err
		}
		wg.Go(func() {
			_ = cmd.Wait() // a child that found problems exits 1: its report says which
			b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(i)+".json"))
			if err == nil {
				err = json.Unmarshal(b, &reps[i])
			}
			if err != nil {
				errs[i] = fmt.Errorf("crowd process %d: no report (%w)", i+1, err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return Report{}, err
		}
	}
	rep, err := mergeReports(reps)
	rep.Users = cfg.Users
	rep.Processes = k
	return rep, err
}

// RunGateProcs runs cfg as procs processes of exe (`crowd --gate`), each with its share of
// the visitors (procShare), of their arrival rate and of MaxConnsPerTarget, and returns their
// reports added up (GateReport.Add; MaxInside is counted in an InsideFile the processes
// share, FIFO is checked within each process). When ctx ends each process is interrupted,
// and reports what it saw until then. Errors: a process that could not start or left no
// report.
func RunGateProcs(ctx context.Context, cfg GateConfig, procs int, exe string, stderr io.Writer) (GateReport, error) {
	if procs < 1 || cfg.Users < procs {
		return GateReport{}, fmt.Errorf("crowd: %d processes for %d visitors", procs, cfg.Users)
	}
	cfg = cfg.withDefaults()
	dir, err := os.MkdirTemp("", "waitroom-crowd-")
	if err != nil {
		return GateReport{}, err
	}
	defer os.RemoveAll(dir)
	inside := filepath.Join(dir, "inside")
	if err := createInside(inside); err != nil {
		return GateReport{}, err
	}
	reps := make([]GateReport, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	var outMu sync.Mutex // the children's lines share stderr
	for i := range procs {
		report := filepath.Join(dir, strconv.Itoa(i)+".json")
		cmd := exec.CommandContext(ctx, exe, "crowd", "--gate", strings.Join(cfg.Targets, ","), "--gate-path", cfg.Path,
			"--users", strconv.Itoa(procShare(cfg.Users, procs, i)), "--rate", strconv.FormatFloat(cfg.Rate/float64(procs), 'f', -1, 64),
			"--gate-requests", strconv.Itoa(cfg.Requests), "--gate-think", cfg.ThinkTime.String(),
			"--poll-scale", strconv.FormatFloat(cfg.PollScale, 'f', -1, 64), "--deadline", cfg.Deadline.String(),
			"--request-timeout", cfg.RequestTimeout.String(),
			"--gate-max-conns", strconv.Itoa(procConns(cfg.MaxConnsPerTarget, procs)), "--gate-inside-file", inside, "--json", report)
		if cfg.UserAddrs.IsValid() {
			sub, ok := addrShare(cfg.UserAddrs, procs, i)
			if !ok {
				return GateReport{}, fmt.Errorf("--user-addrs %s has fewer addresses than --procs %d", cfg.UserAddrs, procs)
			}
			cmd.Args = append(cmd.Args, "--user-addrs", sub.String())
		}
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) } // it stops and reports
		cmd.Stderr = &prefixWriter{mu: &outMu, w: stderr, prefix: fmt.Sprintf("[%d] ", i+1)}
		if err := cmd.Start(); err != nil {
			return GateReport{}, fmt.Errorf("crowd process %d: %w", i+1, err)
		}
		wg.Go(func() {
			werr := cmd.Wait() // a child that saw FIFO violations exits 1: its report says so
			b, err := os.ReadFile(report)
			if err == nil {
				err = json.Unmarshal(b, &reps[i])
			}
			if err != nil {
				errs[i] = fmt.Errorf("crowd process %d (%v): no report (%w)", i+1, werr, err)
			}
		})
	}
	wg.Wait()
	var total GateReport
	for _, r := range reps {
		total.Add(r)
	}
	shared, err := openInside(inside)
	if err != nil {
		return total, errors.Join(append(errs, err)...)
	}
	defer shared.close()
	total.MaxInside = shared.most.Load() // what every process counted, together
	return total, errors.Join(errs...)
}

// procConns is each of procs processes' share of a cap of conns connections a gate: 0 (no
// cap) stays 0, a cap is shared out, at least 1 each.
func procConns(conns, procs int) int {
	if conns <= 0 {
		return 0
	}
	return max(1, conns/procs)
}

// prefixWriter writes each write (a line of progress) with a prefix, holding mu (shared by
// the writers of one w).
type prefixWriter struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := io.WriteString(p.w, p.prefix+string(b)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Keys of Report.Histograms.
const (
	histJoin      = "join_us"
	histStatus    = "status_us"
	histAdmission = "admission_ms"
	histPush      = "push_us"
)

// mergeReports adds up the reports of several processes of one run.
func mergeReports(reps []Report) (Report, error) {
	out := Report{Errors: map[string]int64{}, Terminal: map[string]int64{}}
	hists := map[string]*hdrhistogram.Histogram{}
	maxes := map[string]float64{}
	for i, r := range reps {
		if i == 0 {
			out.Event, out.Targets, out.MaxActive = r.Event, r.Targets, r.MaxActive
		}
		out.DurationS = max(out.DurationS, r.DurationS)
		out.DeadlineReached = out.DeadlineReached || r.DeadlineReached
		out.Requests += r.Requests
		out.Joined += r.Joined
		out.JoinsPerS += r.JoinsPerS
		out.Admitted += r.Admitted
		out.Left += r.Left
		out.Failed += r.Failed
		out.Lost += r.Lost
		out.Failovers += r.Failovers
		out.Rejoins += r.Rejoins
		out.FIFOViolations += r.FIFOViolations
		out.FIFOExamples = append(out.FIFOExamples, r.FIFOExamples...)
		out.PushAdmitted += r.PushAdmitted
		out.PushFallbacks += r.PushFallbacks
		out.PushSilent += r.PushSilent
		out.ChallengesSolved += r.ChallengesSolved
		out.Presolved += r.Presolved
		out.MaxActiveSeen = max(out.MaxActiveSeen, r.MaxActiveSeen)
		for k, v := range r.Errors {
			out.Errors[k] += v
		}
		for k, v := range r.Terminal {
			out.Terminal[k] += v
		}
		if r.PushLatencyMS != nil {
			out.PushLatencyMS = &Latency{}
		}
		for _, name := range slices.Sorted(maps.Keys(r.Histograms)) {
			h := hdrhistogram.Import(r.Histograms[name])
			if hists[name] == nil {
				hists[name] = h
			} else {
				hists[name].Merge(h)
			}
		}
		maxes[histJoin] = max(maxes[histJoin], r.JoinLatencyMS.Max)
		maxes[histStatus] = max(maxes[histStatus], r.StatusLatencyMS.Max)
		maxes[histAdmission] = max(maxes[histAdmission], r.TimeToAdmissionS.Max)
		if r.PushLatencyMS != nil {
			maxes[histPush] = max(maxes[histPush], r.PushLatencyMS.Max)
		}
	}
	if len(out.FIFOExamples) > maxFIFOExamples {
		out.FIFOExamples = out.FIFOExamples[:maxFIFOExamples]
	}
	if len(hists) != 4 && !(len(hists) == 3 && out.PushLatencyMS == nil) {
		return out, fmt.Errorf("crowd processes' reports carry %d histograms, want the latencies' (were they run with --procs?)", len(hists))
	}
	lat := func(name string) Latency {
		h := hists[name]
		q := h.ValueAtPercentiles([]float64{50, 99, 99.9})
		mx := maxes[name]
		at := func(p float64) float64 { return min(float64(q[p])/1000, mx) }
		return Latency{Count: h.TotalCount(), P50: at(50), P99: at(99), P999: at(99.9), Max: mx}
	}
	out.JoinLatencyMS, out.StatusLatencyMS = lat(histJoin), lat(histStatus)
	if out.PushLatencyMS != nil {
		l := lat(histPush)
		out.PushLatencyMS = &l
	}
	ha := hists[histAdmission]
	mx := maxes[histAdmission]
	at := func(p float64) float64 { return min(float64(ha.ValueAtQuantile(p))/1000, mx) }
	out.TimeToAdmissionS = AdmissionTime{P50: at(50), P90: at(90), P99: at(99), Max: mx}
	return out, nil
}

// histograms exports the run's latency histograms for a --procs parent (see mergeReports).
func (r *runner) histograms() map[string]*hdrhistogram.Snapshot {
	out := map[string]*hdrhistogram.Snapshot{
		histJoin: r.joinLatency.export(), histStatus: r.statusLatency.export(), histAdmission: r.admission.export(),
	}
	if r.cfg.Push {
		out[histPush] = r.pushLatency.export()
	}
	return out
}

func (h *histogram) export() *hdrhistogram.Snapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.h.Export()
}
