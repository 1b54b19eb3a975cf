package sale

import (
	"fmt"
	"testing"
	"time"
)

func seatNames(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("R%d-%d", i/20+1, i%20+1)
	}
	return s
}

// TestInventorySignature pins Signature (FNV-1a 64 of the configuration, values computed with
// the hand-written FNV before the switch to hash/fnv): a store keeps the signature, so a change
// would make every running store rewrite its seat lists once, and a collision would make it skip
// a real change. The event is not part of it. Inventories reach a store with the defaults of
// event.Event applied (4 per booking, 300 s holds, a seated capacity of its seats), as
// withDefaults does here; the pinned values were computed that way.
func TestInventorySignature(t *testing.T) {
	for _, tc := range []struct {
		name string
		inv  Inventory
		want string
	}{
		{"zero (defaults)", Inventory{}, "13551cfdce00514a"},
		{"general admission", Inventory{Event: "concert", Capacity: 500}, "464d9a1f4ec2ace9"},
		{"general admission, other event", Inventory{Event: "other", Capacity: 500}, "464d9a1f4ec2ace9"},
		{"explicit defaults", Inventory{Capacity: 500, MaxPerBooking: 4, HoldTTL: 300 * time.Second}, "464d9a1f4ec2ace9"},
		{"max per booking", Inventory{Capacity: 500, MaxPerBooking: 7}, "e17d14d3b63a7f30"},
		{"hold ttl", Inventory{Capacity: 500, HoldTTL: 90 * time.Second}, "c60d80ee9a186831"},
		{"hold ttl in ms", Inventory{Capacity: 500, HoldTTL: 90500 * time.Millisecond}, "901facc44d53ca74"},
		{"seats", Inventory{Seats: []string{"A1", "A2", "B1"}}, "45e8bc04e6d4028f"},
		{"seats, other order", Inventory{Seats: []string{"A2", "A1", "B1"}}, "a1f8005ad517e405"},
		{"seats joined differently", Inventory{Seats: []string{"A1A2", "B1"}}, "6155567d47a2e4ea"},
		{"seats and capacity", Inventory{Capacity: 2, Seats: []string{"A1", "A2", "B1"}}, "0c4862e4af491832"},
		{"1000 seats", Inventory{Seats: seatNames(1000), MaxPerBooking: 10, HoldTTL: 5 * time.Minute}, "74c5c1b14cd34406"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := withDefaults(tc.inv).Signature(); got != tc.want {
				t.Errorf("Signature() = %s, want %s", got, tc.want)
			}
		})
	}
}

// withDefaults applies the defaults event.Event.WithDefaults gives an inventory (this package
// cannot import event, which imports it).
func withDefaults(inv Inventory) Inventory {
	if inv.MaxPerBooking == 0 {
		inv.MaxPerBooking = 4
	}
	if inv.HoldTTL == 0 {
		inv.HoldTTL = 300 * time.Second
	}
	if inv.Capacity == 0 && len(inv.Seats) > 0 {
		inv.Capacity = int64(len(inv.Seats))
	}
	return inv
}
