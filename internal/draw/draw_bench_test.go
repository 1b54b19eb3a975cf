package draw

import (
	"fmt"
	"testing"
)

// BenchmarkPlace measures Place over every ticket of draws of 10^5 and 10^6 tickets (the
// status call's hot path), with the tabulated round functions New uses and with AES in every
// round (the path of draws above 2^28 tickets).
func BenchmarkPlace(b *testing.B) {
	seed := make([]byte, SeedLen)
	for _, n := range []int64{100_000, 1_000_000} {
		for _, tab := range []bool{true, false} {
			name := fmt.Sprintf("n=%d/tables=%t", n, tab)
			b.Run(name, func(b *testing.B) {
				d, err := newDraw(seed, n, tab)
				if err != nil {
					b.Fatal(err)
				}
				var sink int64
				x := int64(0)
				for b.Loop() {
					x++
					if x > n {
						x = 1
					}
					sink += d.Place(x)
				}
				if sink == 0 {
					b.Fatal("no places")
				}
			})
		}
	}
}

// BenchmarkNew measures building a draw of 10^6 tickets (tables included).
func BenchmarkNew(b *testing.B) {
	seed := make([]byte, SeedLen)
	for b.Loop() {
		if _, err := New(seed, 1_000_000); err != nil {
			b.Fatal(err)
		}
	}
}
