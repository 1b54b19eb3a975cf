package queue

import (
	"testing"
	"time"
)

func TestPaceReservesAheadOfABurst(t *testing.T) {
	var p Pace
	t0 := time.Unix(1000, 0)
	// Unknown line, or one that barely moves: the fixed blocks.
	if s, v := p.Ahead("e"); s != SeqBlock || v != ServingBlock {
		t.Fatalf("unknown line: ahead %d, %d; want %d, %d", s, v, SeqBlock, ServingBlock)
	}
	p.Observe("e", 0, 0, t0)
	if s, v := p.Observe("e", 10, 1, t0.Add(time.Second)); s != SeqBlock || v != ServingBlock {
		t.Fatalf("slow line: ahead %d, %d; want the blocks", s, v)
	}
	// 3,300 joins and 2,000 admissions a second: PaceHorizon of each.
	s, v := p.Observe("e", 10+330, 1+200, t0.Add(1100*time.Millisecond))
	if want := int64(6656); s != want { // 3,300/s * 2 s = 6,600, rounded up to a multiple of 64
		t.Fatalf("seq ahead at 3,300/s = %d, want %d", s, want)
	}
	if s%SeqAlign != 0 {
		t.Fatalf("seq ahead %d is not a multiple of SeqAlign", s)
	}
	if v != 4000 {
		t.Fatalf("serving ahead at 2,000/s = %d, want 4000", v)
	}
	if s2, v2 := p.Ahead("e"); s2 != s || v2 != v {
		t.Fatalf("Ahead = %d, %d; Observe said %d, %d", s2, v2, s, v)
	}
	// A lull: the estimate falls by a fifth per interval, not at once.
	s, v = p.Observe("e", 340, 201, t0.Add(1200*time.Millisecond))
	if s != 5312 || v != 3200 { // 2,640/s and 1,600/s
		t.Fatalf("after a lull: ahead %d, %d; want 5312, 3200", s, v)
	}
	// An interval under 20 ms is not measured (a rate over it would be noise).
	if s2, v2 := p.Observe("e", 100000, 100000, t0.Add(1210*time.Millisecond)); s2 != s || v2 != v {
		t.Fatalf("a 10 ms interval changed the estimate: %d, %d", s2, v2)
	}
	// Whatever the burst, capped.
	s, v = p.Observe("e", 10_000_000, 10_000_000, t0.Add(2*time.Second))
	if s != MaxSeqAhead || v != MaxServingAhead {
		t.Fatalf("huge burst: ahead %d, %d; want the caps %d, %d", s, v, MaxSeqAhead, MaxServingAhead)
	}
	// Lines are apart.
	if s, v := p.Ahead("other"); s != SeqBlock || v != ServingBlock {
		t.Fatalf("another line: ahead %d, %d", s, v)
	}
}
