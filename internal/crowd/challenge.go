package crowd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/waitroom/waitroom/internal/challenge"
)

// An event with "challenge": {"type": "pow"} asks every join for a solved proof of work
// (docs/challenge.md). The users solve it as the waiting-room page does: GET the event's
// challenge, solve it (challenge.Solve, on the user's own goroutine: the CPU work a phone's
// Web Worker does), join with {"challenge", "solution"}, and keep that body for the join's
// retries (a retry of a join that used it gets its ticket back). A join answered 401
// challenge_required or 403 challenge_failed gets a new challenge, at most maxChallenges
// times in a row. Named joins (the admin key) are never challenged.

// maxChallenges is how many challenge refusals in a row a user's join takes before it gives up.
const maxChallenges = 3

// challengeInfo is the part of GET /v1/events/{id}/challenge the users need.
type challengeInfo struct {
	Type      string `json:"type"` // none, pow or external
	Challenge string `json:"challenge"`
}

// challengeURL is the event's challenge on target ti.
func (r *runner) challengeURL(ti int) string {
	return strings.TrimSuffix(r.ticketsOf[ti], "/tickets") + "/challenge"
}

// challengeRefused reports whether a join's answer asks for a (new) challenge.
func challengeRefused(a answer) bool {
	return (a.code == http.StatusUnauthorized && a.problem.Code == "challenge_required") ||
		(a.code == http.StatusForbidden && a.problem.Code == "challenge_failed")
}

// prove fetches a challenge for c's user (retrying failures with back-off on the next
// instance, as a join is retried), solves it and keeps the join body in c.proof. ok is false
// when the user is done: out says how (the deadline, or an event whose challenge the users
// cannot solve: an external captcha).
func (r *runner) prove(c *call) (out outcome, ok bool) {
	for fails := 0; ; fails++ {
		a, sent := r.do(c, kindChallenge, r.challengeURL(c.target))
		switch {
		case !sent:
			return outLost, false
		case a.code == http.StatusOK && a.ch.Type == "pow":
			return r.solve(c.ctx, c, a.ch.Challenge)
		case a.code == http.StatusOK && a.ch.Type == "none":
			c.proof = nil // the event dropped its challenge
			return 0, true
		case a.code == http.StatusOK:
			r.addError(errChallengeType)
			return outFailed, false
		case !retryable(a.code):
			return outFailed, false
		}
		r.nextTarget(c)
		if !sleep(c.ctx, r.backoff(fails)) {
			return outLost, false
		}
	}
}

// solve solves ch and keeps the join body in c.proof, timing the work.
func (r *runner) solve(ctx context.Context, c *call, ch string) (outcome, bool) {
	start := time.Now()
	sol, err := challenge.Solve(ctx, ch)
	if err != nil {
		if ctx.Err() != nil {
			return outLost, false
		}
		r.addError(errChallengeType) // not a challenge of the known form
		return outFailed, false
	}
	r.solveTime.record(time.Since(start).Microseconds())
	c.proof, _ = json.Marshal(map[string]string{"challenge": ch, "solution": sol}) // strings: cannot fail
	return 0, true
}

// presolve has every user fetch and solve its challenge before the run starts
// (Config.Presolve), Concurrency users at a time, keeping the join bodies in r.proofs.
func (r *runner) presolve(ctx context.Context, progress io.Writer) {
	start := time.Now()
	r.proofs = make([][]byte, r.cfg.Users)
	var next, solved atomic.Int64
	var wg sync.WaitGroup
	for range r.cfg.Concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= r.cfg.Users || ctx.Err() != nil {
					return
				}
				c := &call{ctx: ctx, user: i, target: i % len(r.cfg.Targets), done: make(chan struct{}, 1)}
				if _, ok := r.prove(c); ok && c.proof != nil {
					r.proofs[i] = c.proof
					solved.Add(1)
				}
			}
		})
	}
	wg.Wait()
	r.presolved = solved.Load()
	fmt.Fprintf(progress, "crowd: %d of %d users solved their challenges before the start, in %s\n",
		solved.Load(), r.cfg.Users, time.Since(start).Round(time.Millisecond))
}
