package token

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/waitroom/waitroom/internal/queue"
)

const b64URLAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

func testTicketIDs(t testing.TB) *TicketIDs {
	t.Helper()
	return NewTicketIDs(mustKeys(t, testSecret).TicketMAC)
}

// specEncode is the ticket id construction written out from the specification.
func specEncode(key []byte, ref queue.TicketRef) string {
	var head [12]byte
	binary.BigEndian.PutUint32(head[:4], ref.Generation)
	binary.BigEndian.PutUint64(head[4:], uint64(ref.Number))
	m := hmac.New(sha256.New, key)
	m.Write([]byte("waitroom ticket\x00" + ref.Event + "\x00"))
	m.Write(head[:])
	return base64.RawURLEncoding.EncodeToString(append(head[:], m.Sum(nil)[:16]...))
}

func TestTicketIDRoundTrip(t *testing.T) {
	ids := testTicketIDs(t)
	key := mustKeys(t, testSecret).TicketMAC
	for _, ref := range []queue.TicketRef{
		{Event: "e", Generation: 0, Number: 1},
		{Event: "concert-2026", Generation: 1, Number: 42},
		{Event: "a_b-c", Generation: 7, Number: 1 << 40},
		{Event: "x", Generation: math.MaxUint32, Number: math.MaxInt64},
		{Event: strings.Repeat("z", 64), Generation: 123456, Number: 987654321},
	} {
		id := ids.Encode(ref)
		if TicketIDLen != 38 || len(id) != TicketIDLen {
			t.Fatalf("%+v: id %q has length %d", ref, id, len(id))
		}
		if strings.Trim(id, b64URLAlphabet) != "" {
			t.Fatalf("id %q has characters outside base64url", id)
		}
		if want := specEncode(key, ref); id != want {
			t.Fatalf("%+v: Encode = %q, spec gives %q", ref, id, want)
		}
		got, err := ids.Decode(ref.Event, id)
		if err != nil || got != ref {
			t.Fatalf("Decode(%q, %q) = %+v, %v; want %+v", ref.Event, id, got, err, ref)
		}
	}
}

func TestTicketIDGolden(t *testing.T) {
	// Pinned so that a change of format, which would strand every ticket in flight, is caught.
	id := testTicketIDs(t).Encode(queue.TicketRef{Event: "concert", Generation: 3, Number: 1000})
	if id != goldenTicketID {
		t.Fatalf("id = %q, want %q", id, goldenTicketID)
	}
}

const goldenTicketID = "AAAAAwAAAAAAAAPodMh7uF9JS78893jY52-rXw"

func TestTicketIDTamperEveryCharacter(t *testing.T) {
	ids := testTicketIDs(t)
	ref := queue.TicketRef{Event: "concert", Generation: 3, Number: 1000}
	id := ids.Encode(ref)
	for i := range len(id) {
		for _, c := range []byte(b64URLAlphabet) {
			if c == id[i] {
				continue
			}
			bad := id[:i] + string(c) + id[i+1:]
			if got, err := ids.Decode(ref.Event, bad); !errors.Is(err, ErrBadTicketID) || got != (queue.TicketRef{}) {
				t.Fatalf("Decode(%q) = %+v, %v; want ErrBadTicketID", bad, got, err)
			}
		}
	}
}

func TestTicketIDTamperEveryBit(t *testing.T) {
	ids := testTicketIDs(t)
	ref := queue.TicketRef{Event: "concert", Generation: 3, Number: 1000}
	raw, err := base64.RawURLEncoding.DecodeString(ids.Encode(ref))
	if err != nil {
		t.Fatal(err)
	}
	for i := range len(raw) * 8 {
		b := bytes.Clone(raw)
		b[i/8] ^= 1 << (i % 8)
		bad := base64.RawURLEncoding.EncodeToString(b)
		if _, err := ids.Decode(ref.Event, bad); !errors.Is(err, ErrBadTicketID) {
			t.Fatalf("bit %d flipped: err = %v, want ErrBadTicketID", i, err)
		}
	}
}

func TestTicketIDRejects(t *testing.T) {
	ids := testTicketIDs(t)
	ref := queue.TicketRef{Event: "concert", Generation: 3, Number: 1000}
	id := ids.Encode(ref)
	other := NewTicketIDs(mustKeys(t, "another secret of the operator").TicketMAC)

	// The last character carries 2 data bits and 4 unused bits that must be zero; changing
	// only an unused bit gives a string that lenient decoders would map to the same bytes.
	last := strings.IndexByte(b64URLAlphabet, id[len(id)-1])
	slack := id[:len(id)-1] + string(b64URLAlphabet[last^1])

	for _, tc := range []struct {
		name, event, id string
	}{
		{"empty", "concert", ""},
		{"one short", "concert", id[:37]},
		{"one long", "concert", id + "A"},
		{"padded", "concert", id + "=="},
		{"std alphabet +", "concert", "+" + id[1:]},
		{"std alphabet /", "concert", id[:5] + "/" + id[6:]},
		{"upper-cased", "concert", strings.ToUpper(id)},
		{"lower-cased", "concert", strings.ToLower(id)},
		{"newline inside", "concert", id[:10] + "\n" + id[11:]},
		{"newlines replacing data", "concert", id[:36] + "\r\n"},
		{"space", "concert", " " + id[1:]},
		{"non-zero unused bits", "concert", slack},
		{"non-ASCII", "concert", "é" + id[2:]},
		{"wrong event", "concert2", id},
		{"event prefix", "concer", id},
		{"empty event", "", id},
		{"other key", "concert", other.Encode(ref)},
		{"number 0 with valid MAC", "concert", ids.Encode(queue.TicketRef{Event: "concert", Generation: 3, Number: 0})},
		{"negative number with valid MAC", "concert", ids.Encode(queue.TicketRef{Event: "concert", Generation: 3, Number: -5})},
		{"min int64 with valid MAC", "concert", ids.Encode(queue.TicketRef{Event: "concert", Number: math.MinInt64})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ids.Decode(tc.event, tc.id)
			if !errors.Is(err, ErrBadTicketID) || got != (queue.TicketRef{}) {
				t.Fatalf("Decode(%q, %q) = %+v, %v; want ErrBadTicketID", tc.event, tc.id, got, err)
			}
		})
	}
}

func TestTicketIDEventBinding(t *testing.T) {
	ids := testTicketIDs(t)
	// Same generation and number in two events: different ids, neither valid for the other.
	a := ids.Encode(queue.TicketRef{Event: "a", Generation: 1, Number: 5})
	b := ids.Encode(queue.TicketRef{Event: "b", Generation: 1, Number: 5})
	if a == b {
		t.Fatal("ids of different events are equal")
	}
	if _, err := ids.Decode("b", a); !errors.Is(err, ErrBadTicketID) {
		t.Fatalf("id of event a accepted for event b: %v", err)
	}
	// A different generation is a different ticket.
	if ids.Encode(queue.TicketRef{Event: "a", Generation: 2, Number: 5}) == a {
		t.Fatal("generation not encoded")
	}
}

func TestNewTicketIDsCopiesKeyAndChecksLength(t *testing.T) {
	key := bytes.Clone(mustKeys(t, testSecret).TicketMAC)
	ids := NewTicketIDs(key)
	ref := queue.TicketRef{Event: "e", Generation: 1, Number: 1}
	id := ids.Encode(ref)
	clear(key)
	if _, err := ids.Decode("e", id); err != nil {
		t.Fatalf("codec affected by caller changing its key slice: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("NewTicketIDs accepted a 15-byte key")
		}
	}()
	NewTicketIDs(make([]byte, 15))
}

// TestTicketIDKeyRotation (issue 20): with new,old an id made under old still decodes (the
// ticket keeps its place), new ids are made under new, and an id decodes only while its key
// is configured. A short previous key panics like a short current one.
func TestTicketIDKeyRotation(t *testing.T) {
	oldKey, newKey := mustKeys(t, testSecret).TicketMAC, mustKeys(t, "another operator secret, rotated in").TicketMAC
	before := NewTicketIDs(oldKey)
	rotated := NewTicketIDs(newKey, oldKey)
	onlyNew := NewTicketIDs(newKey)
	ref := queue.TicketRef{Event: "e", Generation: 3, Number: 42}

	old := before.Encode(ref)
	if got, err := rotated.Decode("e", old); err != nil || got != ref {
		t.Fatalf("an id made before the rotation: %+v, %v; want %+v", got, err, ref)
	}
	if _, err := rotated.Decode("f", old); !errors.Is(err, ErrBadTicketID) {
		t.Fatalf("an old id for another event: %v", err)
	}
	made := rotated.Encode(ref)
	if made != specEncode(newKey, ref) {
		t.Fatalf("ids are made with the current key: %q", made)
	}
	if got, err := onlyNew.Decode("e", made); err != nil || got != ref {
		t.Fatalf("an id made after the rotation, once old is removed: %+v, %v", got, err)
	}
	if _, err := onlyNew.Decode("e", old); !errors.Is(err, ErrBadTicketID) {
		t.Fatalf("an id of a removed key: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("NewTicketIDs accepted a 15-byte previous key")
		}
	}()
	NewTicketIDs(newKey, make([]byte, 15))
}

func TestTicketIDConcurrent(t *testing.T) {
	ids := testTicketIDs(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for n := int64(1); n <= 500; n++ {
				ref := queue.TicketRef{Event: "e", Generation: uint32(g), Number: n}
				got, err := ids.Decode("e", ids.Encode(ref))
				if err != nil || got != ref {
					t.Errorf("round trip %+v: %+v, %v", ref, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func FuzzDecode(f *testing.F) {
	ids := testTicketIDs(f)
	for _, ref := range []queue.TicketRef{
		{Event: "concert", Generation: 3, Number: 1000},
		{Event: "e", Generation: math.MaxUint32, Number: math.MaxInt64},
		{Event: "e", Number: 0},
	} {
		f.Add(ref.Event, ids.Encode(ref))
	}
	f.Add("concert", "")
	f.Add("concert", strings.Repeat("A", 38))
	f.Add("concert", strings.Repeat("_", 38))
	f.Add("concert", strings.Repeat("=", 38))
	f.Add("", "\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r")
	f.Add("concert", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Fuzz(func(t *testing.T, event, id string) {
		ref, err := ids.Decode(event, id)
		if err != nil {
			if !errors.Is(err, ErrBadTicketID) || ref != (queue.TicketRef{}) {
				t.Fatalf("Decode(%q, %q) = %+v, %v", event, id, ref, err)
			}
			return
		}
		// Accepted: it must be exactly the id Encode makes for the ticket it names.
		if ref.Event != event || ref.Number < 1 || ids.Encode(ref) != id {
			t.Fatalf("Decode(%q, %q) accepted %+v, which encodes to %q", event, id, ref, ids.Encode(ref))
		}
	})
}

func BenchmarkTicketEncode(b *testing.B) {
	ids := testTicketIDs(b)
	ref := queue.TicketRef{Event: "concert", Generation: 3, Number: 1000}
	b.ReportAllocs()
	for b.Loop() {
		ids.Encode(ref)
	}
}

func BenchmarkTicketDecode(b *testing.B) {
	ids := testTicketIDs(b)
	id := ids.Encode(queue.TicketRef{Event: "concert", Generation: 3, Number: 1000})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ids.Decode("concert", id); err != nil {
			b.Fatal(err)
		}
	}
}

func TestTicketAppendEncodeMatchesEncode(t *testing.T) {
	ids := NewTicketIDs(make([]byte, 32))
	ref := queue.TicketRef{Event: "concert", Generation: 7, Number: 12345}
	got := ids.AppendEncode([]byte(`{"ticket_id":"`), ref)
	if want := `{"ticket_id":"` + ids.Encode(ref); string(got) != want {
		t.Fatalf("AppendEncode = %q, want %q", got, want)
	}
	if got = ids.AppendEncode(got[:0], ref); string(got) != ids.Encode(ref) {
		t.Fatalf("AppendEncode into a reused buffer = %q", got)
	}
}
