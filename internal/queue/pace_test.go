package queue

import (
	"testing"
	"time"
)

func TestPaceReservesAheadOfABurst(t *testing.T) {
	var p Pace
	t0 := time.Unix(1000, 0)
	// Unknown line, or one that barely moves: the fixed block.
	if s := p.Ahead("e"); s != SeqBlock {
		t.Fatalf("unknown line: ahead %d; want %d", s, SeqBlock)
	}
	p.Observe("e", 0, t0)
	if s := p.Observe("e", 10, t0.Add(time.Second)); s != SeqBlock {
		t.Fatalf("slow line: ahead %d; want the block", s)
	}
	// 3,300 joins a second: PaceHorizon of them.
	s := p.Observe("e", 10+330, t0.Add(1100*time.Millisecond))
	if want := int64(6656); s != want { // 3,300/s * 2 s = 6,600, rounded up to a multiple of 64
		t.Fatalf("seq ahead at 3,300/s = %d, want %d", s, want)
	}
	if s%SeqAlign != 0 {
		t.Fatalf("seq ahead %d is not a multiple of SeqAlign", s)
	}
	if s2 := p.Ahead("e"); s2 != s {
		t.Fatalf("Ahead = %d; Observe said %d", s2, s)
	}
	// A lull: the estimate falls by a fifth per interval, not at once.
	s = p.Observe("e", 340, t0.Add(1200*time.Millisecond))
	if s != 5312 { // 2,640/s
		t.Fatalf("after a lull: ahead %d; want 5312", s)
	}
	// An interval under 20 ms is not measured (a rate over it would be noise).
	if s2 := p.Observe("e", 100000, t0.Add(1210*time.Millisecond)); s2 != s {
		t.Fatalf("a 10 ms interval changed the estimate: %d", s2)
	}
	// Whatever the burst, capped.
	if s = p.Observe("e", 10_000_000, t0.Add(2*time.Second)); s != MaxSeqAhead {
		t.Fatalf("huge burst: ahead %d; want the cap %d", s, MaxSeqAhead)
	}
	// Lines are apart.
	if s := p.Ahead("other"); s != SeqBlock {
		t.Fatalf("another line: ahead %d", s)
	}
}
