package token

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash"
	"sync"

	"github.com/waitroom/waitroom/internal/queue"
)

// Ticket id layout. An id is the unpadded base64url encoding (RFC 4648 §5) of
//
//	generation (4 bytes, big-endian) ‖ number (8 bytes, big-endian) ‖ tag (16 bytes)
//
// where tag is the first 16 bytes of
//
//	HMAC-SHA256(key, "waitroom ticket\x00" ‖ event ‖ "\x00" ‖ generation (4) ‖ number (8))
const (
	ticketTagLen    = 16
	ticketRawLen    = 4 + 8 + ticketTagLen // 28 bytes
	ticketMACPrefix = "waitroom ticket\x00"
)

// TicketIDLen is the length of every ticket id: 38 characters (28 bytes in unpadded base64).
const TicketIDLen = (ticketRawLen*8 + 5) / 6

// ErrBadTicketID is returned by [TicketIDs.Decode] for any id that was not made by
// [TicketIDs.Encode] with one of its keys for the same event.
var ErrBadTicketID = errors.New("token: bad ticket id")

// ticketB64 is strict so that exactly one string encodes each id (no slack in the 4 unused
// trailing bits).
var ticketB64 = base64.RawURLEncoding.Strict()

// TicketIDs encodes and authenticates ticket ids. It is safe for concurrent use.
//
// A ticket id is self-authenticating: it carries the ticket's generation and number in clear
// plus a 128-bit HMAC-SHA256 tag over them and the event id, keyed with a server secret
// ([Keys.TicketMAC]). The server checks an id by recomputing the tag, so it needs no record of
// the ids it handed out: this is why a waiting ticket costs no memory in the store (see
// package queue). Ticket numbers are sequential and therefore guessable; the tag is not.
// Forging the id of a ticket one does not hold means guessing 128 bits of HMAC output, which,
// HMAC-SHA256 being a PRF, succeeds with probability 2^-128 per try: this meets the
// requirement that a ticket id have at least 122 unguessable bits (the randomness of a
// version 4 UUID, RFC 9562 §5.4). The tag also binds the id to its event, so an id is not
// valid for any other event.
//
// Key rotation: ids are made with the current key and checked under it and each previous key
// (WAITROOM_TOKEN_KEY=new,old), as admission tokens are, so that every ticket handed out
// before a rotation keeps its place until its key is removed.
type TicketIDs struct {
	pools []*sync.Pool // of *ticketMAC, one per key: the current key first
}

// ticketMAC is a keyed HMAC-SHA256 with scratch space, pooled so that computing a tag does
// not allocate.
type ticketMAC struct {
	h   hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

// NewTicketIDs returns a codec that makes ids with macKey and checks them under macKey and
// each of previous (use [Keys.TicketMAC] of each configured key, the current one first; 32
// bytes each). The keys are copied. It panics if a key is shorter than 16 bytes, which can only
// be a programming error since [DeriveKeys] always yields 32 bytes.
func NewTicketIDs(macKey []byte, previous ...[]byte) *TicketIDs {
	t := &TicketIDs{}
	for _, k := range append([][]byte{macKey}, previous...) {
		if len(k) < 16 {
			panic("token: NewTicketIDs: MAC key shorter than 16 bytes")
		}
		key := append([]byte(nil), k...)
		t.pools = append(t.pools, &sync.Pool{New: func() any {
			return &ticketMAC{h: hmac.New(sha256.New, key), buf: make([]byte, 0, 128)}
		}})
	}
	return t
}

// tag writes the 16-byte tag of (event, head) under key i (0: the current key) into dst, head
// being generation ‖ number.
func (t *TicketIDs) tag(i int, dst []byte, event string, head []byte) {
	pool := t.pools[i]
	m := pool.Get().(*ticketMAC)
	b := append(m.buf[:0], ticketMACPrefix...)
	b = append(b, event...)
	b = append(b, 0)
	b = append(b, head...)
	m.h.Reset()
	m.h.Write(b)
	copy(dst, m.h.Sum(m.sum[:0])[:ticketTagLen])
	if cap(b) <= 1024 { // keep the scratch buffer unless an absurd event id grew it
		m.buf = b[:0]
	}
	pool.Put(m)
}

// Encode returns the ticket id of ref: a 38-character base64url string (alphabet A-Z a-z
// 0-9 - _, case-sensitive, no padding). ref.Number should be >= 1: [TicketIDs.Decode] rejects
// ids with smaller numbers. The id does not contain the event id in clear; the event is bound
// by the tag and must be supplied again to Decode.
func (t *TicketIDs) Encode(ref queue.TicketRef) string {
	var out [TicketIDLen]byte
	return string(t.AppendEncode(out[:0], ref))
}

// AppendEncode appends the ticket id of ref (see [TicketIDs.Encode]) to dst and returns the
// extended slice: the ticket answer writes the id straight into its body, without a string.
func (t *TicketIDs) AppendEncode(dst []byte, ref queue.TicketRef) []byte {
	var raw [ticketRawLen]byte
	binary.BigEndian.PutUint32(raw[0:4], ref.Generation)
	binary.BigEndian.PutUint64(raw[4:12], uint64(ref.Number))
	t.tag(0, raw[12:], ref.Event, raw[:12])
	return ticketB64.AppendEncode(dst, raw[:])
}

// Decode checks that id was made by Encode for event with one of the keys (the current one,
// else each previous one in turn: one HMAC per key tried), and returns the ticket it names. It
// returns [ErrBadTicketID] when id has the wrong length, is not canonical unpadded base64url,
// has a number below 1, or its tag matches under no key (compared in constant time with
// hmac.Equal). It never panics, whatever the input.
func (t *TicketIDs) Decode(event, id string) (queue.TicketRef, error) {
	if len(id) != TicketIDLen {
		return queue.TicketRef{}, ErrBadTicketID
	}
	// The decoder skips '\r' and '\n'; insist on the alphabet so only one string is valid.
	for i := 0; i < len(id); i++ {
		if !isB64URL(id[i]) {
			return queue.TicketRef{}, ErrBadTicketID
		}
	}
	var src [TicketIDLen]byte
	copy(src[:], id)
	var raw [ticketRawLen]byte
	n, err := ticketB64.Decode(raw[:], src[:])
	if err != nil || n != ticketRawLen {
		return queue.TicketRef{}, ErrBadTicketID
	}
	gen := binary.BigEndian.Uint32(raw[0:4])
	num := int64(binary.BigEndian.Uint64(raw[4:12]))
	if num < 1 {
		return queue.TicketRef{}, ErrBadTicketID
	}
	var want [ticketTagLen]byte
	for i := range t.pools {
		t.tag(i, want[:], event, raw[:12])
		if hmac.Equal(want[:], raw[12:ticketRawLen]) {
			return queue.TicketRef{Event: event, Generation: gen, Number: num}, nil
		}
	}
	return queue.TicketRef{}, ErrBadTicketID
}

func isB64URL(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}
