package memstore

import (
	"bytes"
	"container/heap"
	"encoding/gob"
	"fmt"
	"slices"

	"github.com/waitroom/waitroom/internal/draw"
	"github.com/waitroom/waitroom/internal/queue"
)

// snapshotVersion changes whenever the encoded shape does; an unknown version is refused.
const snapshotVersion = 1

type snapshot struct {
	Version int
	Lines   []lineState
}

// lineState is a line's exported form for gob.
type lineState struct {
	Config                 queue.EventConfig
	Generation             uint32
	Seq, Serving, Admitted int64
	Left                   []int64
	Marks                  []byte
	Active                 map[int64]int64
	Ends                   map[int64]int64
	Batches                []batch
	Users                  map[string]int64
	UserOf                 map[int64]string
	Tokens                 float64
	TokensMS               int64
	Rate                   float64
	WinStart, WinCount     int64
	SoldOut                bool
	SoldRanges             []batch
	// Durable numbers (durable.go); zero in snapshots made before them.
	SeqCeiling, ServingCeiling int64
	Void                       []int64
	PendingLo, PendingHi       int64
	PendingCount               int64
	// PoolTop: the batches at or below it are a resume's pool (zero in snapshots made before
	// it; GraceUntil, which those have, is ignored by gob).
	PoolTop int64
	// Challenges are the used challenges (id -> when forgotten, unix ms), so that a restart
	// does not make them usable again (absent from snapshots made before they were kept).
	Challenges map[string]int64
	// The opening and its draw (absent from snapshots made before the draw was wired in:
	// such a line settles at its next step, as a line without a draw).
	Opened, DrawPending bool
	DrawSeed            []byte
	DrawN               int64
	// Prequeued counts each client's tickets of the pre-queue until the opening, so that a
	// restart does not give a client its tickets_per_client again.
	Prequeued map[string]int64
	// LeftWaiting and Unclaimed are the running totals of queue.Stats (absent, 0, from
	// snapshots made before them).
	LeftWaiting, Unclaimed int64
}

// Snapshot encodes every line (gob), for the embedded deployment to keep the line across a
// graceful restart. Times inside are absolute (Unix ms), so sessions and claims keep running
// while the process is down.
func (s *Store) Snapshot() ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	snap := snapshot{Version: snapshotVersion}
	// Every line stays locked until it is encoded: the snapshot is one consistent instant.
	for _, ln := range s.lines {
		ln.mu.Lock()
		defer ln.mu.Unlock()
		snap.Lines = append(snap.Lines, lineState{
			Config: ln.cfg, Generation: ln.gen, Seq: ln.seq, Serving: ln.serving, Admitted: ln.admittedTotal,
			Left: ln.left, Marks: ln.marks, Active: ln.active, Ends: ln.ends, Batches: ln.batches, Users: ln.users, UserOf: ln.userOf,
			Tokens: ln.tokens, TokensMS: ln.tokensMS, Rate: ln.rate, WinStart: ln.winStart, WinCount: ln.winCount,
			SoldOut: ln.soldOut, SoldRanges: ln.soldRanges,
			SeqCeiling: ln.sc, ServingCeiling: ln.vc, Void: voidList(ln.void),
			PendingLo: ln.pl, PendingHi: ln.ph, PendingCount: ln.pn, PoolTop: ln.poolTop,
			Challenges: ln.challenges,
			Opened:     ln.opened, DrawPending: ln.drawPending, DrawSeed: ln.drawSeed, DrawN: ln.drawN,
			Prequeued: ln.prequeued, LeftWaiting: ln.leftWaiting, Unclaimed: ln.unclaimedTotal,
		})
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(snap); err != nil {
		return nil, fmt.Errorf("memstore: snapshot: %w", err)
	}
	return buf.Bytes(), nil
}

// Restore replaces every line with those of a Snapshot.
func (s *Store) Restore(data []byte) error {
	var snap snapshot
	if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&snap); err != nil {
		return fmt.Errorf("memstore: restore: %w", err)
	}
	if snap.Version != snapshotVersion {
		return fmt.Errorf("memstore: restore: snapshot version %d, want %d", snap.Version, snapshotVersion)
	}
	lines := make(map[string]*line, len(snap.Lines))
	for _, st := range snap.Lines {
		ln := &line{
			cfg: st.Config, gen: st.Generation, seq: st.Seq, serving: st.Serving, admittedTotal: st.Admitted,
			left: st.Left, marks: st.Marks, active: st.Active, ends: st.Ends, batches: st.Batches, users: st.Users, userOf: st.UserOf,
			tokens: st.Tokens, tokensMS: st.TokensMS, rate: st.Rate, winStart: st.WinStart, winCount: st.WinCount,
			soldOut: st.SoldOut, soldRanges: st.SoldRanges,
			sc: st.SeqCeiling, vc: st.ServingCeiling, pl: st.PendingLo, ph: st.PendingHi, pn: st.PendingCount,
			poolTop: st.PoolTop, challenges: st.Challenges,
			opened: st.Opened, drawPending: st.DrawPending, drawSeed: st.DrawSeed, drawN: st.DrawN,
			prequeued: st.Prequeued, leftWaiting: st.LeftWaiting, unclaimedTotal: st.Unclaimed,
		}
		if len(st.Void) > 0 {
			ln.void = make(map[int64]struct{}, len(st.Void))
			for _, n := range st.Void {
				ln.void[n] = struct{}{}
			}
			ln.voidLo, ln.voidHi = st.Void[0], st.Void[len(st.Void)-1] // ascending (voidList)
		}
		if ln.drawN > 0 {
			d, err := draw.New(ln.drawSeed, ln.drawN)
			if err != nil {
				return fmt.Errorf("memstore: restore: the draw of %q: %w", st.Config.ID, err)
			}
			ln.dr = d
		}
		if ln.active == nil {
			ln.active = make(map[int64]int64)
		}
		if ln.users == nil {
			ln.users = make(map[string]int64)
		}
		for n, exp := range ln.active {
			ln.expiries = append(ln.expiries, expiry[int64]{exp, n})
		}
		heap.Init(&ln.expiries)
		for id, at := range ln.challenges {
			ln.challengeForget = append(ln.challengeForget, expiry[string]{at, id})
		}
		heap.Init(&ln.challengeForget)
		for _, b := range ln.batches {
			if b.Lo <= ln.poolTop {
				ln.poolUnclaimed += b.Unclaimed
			} else {
				ln.unclaimed += b.Unclaimed
			}
		}
		lines[st.Config.ID] = ln
	}
	s.mu.Lock()
	s.lines = lines
	s.mu.Unlock()
	return nil
}

// voidList is the void numbers of a line, ascending (nil for none).
func voidList(v map[int64]struct{}) []int64 {
	if len(v) == 0 {
		return nil
	}
	out := make([]int64, 0, len(v))
	for n := range v {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
