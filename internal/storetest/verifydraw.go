package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/waitroom/waitroom/internal/draw"
	"github.com/waitroom/waitroom/internal/queue"
)

// VerifyDraw is the end-to-end check of the opening's draw on a store (issue 12, item 7): n
// people join a pre-queue drawn with a fixed seed, the line opens, every ticket is told its
// position by the store, and `waitroom verify-draw` (draw.Command) recomputes all n places
// from the revealed seed and the ticket numbers and finds exactly the positions told (nobody
// is admitted or left, so a position is the place). Then a chi-square test of independence
// between arrival and place finds the draw fair to early joiners.
//
// The chi-square test: tickets are put in 10 classes by arrival (numbers in tenths of 1..n)
// and 10 by place; under a uniform draw the 10×10 counts have expectation n/100 each and
// Pearson's statistic follows a chi-square with (10-1)² = 81 degrees of freedom (the margins
// are fixed: each class holds n/10). The test fails above 126.083, its 0.999 quantile: a
// uniform draw fails with probability 0.001. The seed is fixed (SHA-256 of
// "verify-draw"), so the test is deterministic: it cannot flake, and with this seed it passes
// (statistic logged).
//
// workers is the number of goroutines that join and read statuses at once (1 for an
// in-process store). n must be a multiple of 100.
func VerifyDraw(t *testing.T, newStore Factory, n int64, workers int) {
	ctx := context.Background()
	clock := NewClock()
	s := newStore(t, clock.Now)
	sum := sha256.Sum256([]byte("verify-draw"))
	seed := sum[:]
	cfg := newEvent(t, s, func(c *queue.EventConfig) {
		c.MaxActive = 1000
		c.OpensAt = opensAt
		c.DrawSeed = seed
	})

	// Join n tickets before the opening; numbers are 1..n in order of the store's sequence.
	start := time.Now()
	run(t, n, workers, func(int64) error {
		tk, err := s.Join(ctx, queue.JoinParams{Event: cfg.ID})
		if err == nil && (tk.Status != queue.StatusQueued || tk.Position != 0) {
			err = fmt.Errorf("a pre-queue join got %s at position %d", tk.Status, tk.Position)
		}
		return err
	})
	joined := time.Since(start)

	clock.Advance(time.Hour)   // the opening
	told := make([]int64, n+1) // position told, by ticket number
	start = time.Now()
	stats, err := s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	run(t, n, workers, func(num int64) error {
		tk, err := s.Status(ctx, queue.TicketRef{Event: cfg.ID, Generation: stats.Generation, Number: num})
		if err == nil && tk.Status != queue.StatusQueued {
			err = fmt.Errorf("ticket %d is %s", num, tk.Status)
		}
		told[num] = tk.Position
		return err
	})
	t.Logf("%d joins in %s, %d statuses in %s", n, joined.Round(time.Millisecond), n, time.Since(start).Round(time.Millisecond))
	stats, err = s.Stats(ctx, cfg.ID)
	require.NoError(t, err)
	require.Equal(t, n, stats.DrawN)
	require.Equal(t, seed, stats.DrawSeed, "the seed is revealed after the opening")

	// What a person checks: the revealed seed against the commitment published before, and
	// every place told, with `waitroom verify-draw`.
	var lines bytes.Buffer
	for num := int64(1); num <= n; num++ {
		fmt.Fprintf(&lines, "%d %d\n", num, told[num])
	}
	args := []string{"--seed", hex.EncodeToString(stats.DrawSeed), "--commitment", draw.Commitment(seed),
		"--n", fmt.Sprint(stats.DrawN), "--places", "-"}
	var stdout, stderr bytes.Buffer
	code := draw.Command(args, bytes.NewReader(lines.Bytes()), &stdout, &stderr)
	require.Equal(t, 0, code, "verify-draw: %s%s", stdout.String(), stderr.String())
	require.Contains(t, stdout.String(), fmt.Sprintf("all %d places match", n))
	// The check can fail: one place swapped is found.
	swapped := strings.Replace(lines.String(), fmt.Sprintf("\n2 %d\n", told[2]), fmt.Sprintf("\n2 %d\n", told[3]), 1)
	stdout.Reset()
	require.Equal(t, 1, draw.Command(args, strings.NewReader(swapped), &stdout, &stderr), "a wrong place is found")

	// Arrival and place are independent: the early birds are spread over the whole line.
	const classes = 10
	var counts [classes][classes]float64
	for num := int64(1); num <= n; num++ {
		counts[(num-1)*classes/n][(told[num]-1)*classes/n]++
	}
	expected := float64(n) / classes / classes
	var stat float64
	for i := range counts {
		for j := range counts[i] {
			d := counts[i][j] - expected
			stat += d * d / expected
		}
	}
	t.Logf("chi-square of arrival tenth × place tenth over %d tickets: %.2f (df 81, fails above 126.083)", n, stat)
	require.Less(t, stat, 126.083, "arrival and drawn place look dependent: %v", counts)
}

// run calls f(i) for i in 1..n on workers goroutines and fails t on the first error.
func run(t *testing.T, n int64, workers int, f func(int64) error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for w := range workers {
		wg.Go(func() {
			for i := int64(w) + 1; i <= n; i += int64(workers) {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, first)
}
