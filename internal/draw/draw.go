// Package draw is the fair, verifiable opening of an event: the people who joined before
// opens_at hold ticket numbers 1..N in order of arrival, and at opening their places in line
// are drawn by a keyed permutation of 1..N that anyone can recompute once the seed is revealed.
//
// The protocol (docs/draw.md has every byte):
//
//  1. When the event is configured, the operator draws a secret seed ([NewSeed], 32 random
//     bytes) and publishes only its commitment ([Commitment]: the hex SHA-256 of the seed).
//  2. Tickets are numbered 1..N as people join before opens_at (the store's per-event
//     sequence; see package queue).
//  3. At opening the seed is revealed. Ticket number x gets place [Draw.Place](x) in line;
//     anybody checks that the seed matches the commitment ([Verify]) and recomputes every
//     place (`waitroom verify-draw`, or the algorithm of docs/draw.md in any language).
//
// The permutation is a balanced Feistel network over the smallest even-bit domain holding N,
// restricted to [0, N) by cycle walking (J. Black and P. Rogaway, "Ciphers with Arbitrary
// Finite Domains", CT-RSA 2002), with AES-128 as round function and the round counts of the
// FFX-A2 parameter set (M. Bellare, P. Rogaway, T. Spies, "The FFX Mode of Operation for
// Format-Preserving Encryption", 2010, and its addendum "A parameter collection for enciphering
// strings of arbitrary radix and length"). Place and Number take O(1) expected time and keep
// nothing per ticket.
package draw

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"sync"
)

// SeedLen is the length of a draw seed in bytes.
const SeedLen = 32

// MaxN is the largest number of tickets a draw can hold (2^62: the domain needs 2k <= 62 bits).
const MaxN = int64(1) << 62

// keyInfo is the HKDF "info" prefix (RFC 5869 §3.2) of the AES key; the 8-byte big-endian N
// follows it. Changing it changes every draw, hence the version suffix.
const keyInfo = "waitroom draw v1"

// tableMaxHalfBits: for a half width k up to this, every round function is tabulated when the
// draw is built (rounds × 2^k entries of 2 bytes, at most 18 × 16384 × 2 = 576 KiB), so Place
// and Number do no AES at all. Above it (N > 2^28), each round runs AES.
const tableMaxHalfBits = 14

// Errors returned by [New], [ParseSeed] and [Verify].
var (
	// ErrBadSeed: the seed is not 32 bytes (or 64 hex characters).
	ErrBadSeed = errors.New("draw: seed must be 32 bytes (64 hex characters)")
	// ErrBadN: N is outside [1, MaxN].
	ErrBadN = errors.New("draw: n must be between 1 and 2^62")
	// ErrCommitmentMismatch: the seed does not hash to the commitment.
	ErrCommitmentMismatch = errors.New("draw: the seed does not match the commitment")
)

// Draw is the drawn order of one event's N tickets: a bijection of [1, N] onto itself. It is
// immutable and safe for concurrent use; build it once per event (see [New] for its cost) and
// share it.
type Draw struct {
	n      uint64 // N
	k      uint   // half width in bits: the Feistel domain is [0, 2^(2k))
	mask   uint64 // 2^k - 1
	rounds int
	block  cipher.Block // AES-128 under the derived key
	// table[i<<k | r] = F_i(r) for every round i and half r, when k <= tableMaxHalfBits;
	// nil otherwise.
	table []uint16
}

// New returns the draw of n tickets under seed (32 bytes, see [NewSeed]). The seed is not
// kept. Errors: [ErrBadSeed], [ErrBadN].
//
// Cost: one HKDF and one AES key schedule, plus rounds × 2^k AES blocks to tabulate the round
// functions when N <= 2^28 (2^k is about sqrt(N)): 18,432 blocks for N = 10^6, well under a
// millisecond here.
func New(seed []byte, n int64) (*Draw, error) {
	return newDraw(seed, n, true)
}

func newDraw(seed []byte, n int64, tabulate bool) (*Draw, error) {
	if len(seed) != SeedLen {
		return nil, ErrBadSeed
	}
	if n < 1 || n > MaxN {
		return nil, ErrBadN
	}
	k := halfBits(uint64(n))
	d := &Draw{n: uint64(n), k: k, mask: 1<<k - 1, rounds: Rounds(2 * k)}

	key, err := hkdf.Key(sha256.New, seed, nil, string(keyInfoFor(n)), 16)
	if err != nil {
		return nil, fmt.Errorf("draw: hkdf: %w", err) // unreachable: 16 <= 255*32 bytes
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("draw: aes: %w", err) // unreachable: the key is 16 bytes
	}
	d.block = block

	if tabulate && k <= tableMaxHalfBits {
		size := uint64(1) << k
		d.table = make([]uint16, uint64(d.rounds)*size)
		buf := new(roundBuf)
		for i := range d.rounds {
			for r := range size {
				d.table[uint64(i)<<k|r] = uint16(d.aesRound(buf, i, r))
			}
		}
	}
	return d, nil
}

// roundBuf is the input and output block of one AES call. Slices of it passed to the
// cipher.Block interface escape to the heap, so they are reused rather than declared per call.
type roundBuf struct{ in, out [aes.BlockSize]byte }

var roundBufs = sync.Pool{New: func() any { return new(roundBuf) }}

// keyInfoFor returns the HKDF info of a draw of n tickets: "waitroom draw v1" ‖ uint64 BE n.
func keyInfoFor(n int64) []byte {
	return binary.BigEndian.AppendUint64([]byte(keyInfo), uint64(n))
}

// halfBits returns the half width k >= 1 of the Feistel domain of n tickets: the smallest k
// with 4^k >= n.
func halfBits(n uint64) uint {
	if n <= 4 {
		return 1
	}
	b := uint(bits.Len64(n - 1)) // bits to hold 0..n-1
	return (b + 1) / 2
}

// Rounds returns the number of Feistel rounds for a domain of bits = 2k bits: the FFX-A2
// round counts for radix 2 (Bellare, Rogaway and Spies, 2010), with the count of the smallest
// size they define (8-9 bits) for the smaller domains below it:
//
//	bits   2-9   10-13  14-19  20-31  32-62
//	rounds 36    30     24     18     12
func Rounds(bits uint) int {
	switch {
	case bits <= 9:
		return 36
	case bits <= 13:
		return 30
	case bits <= 19:
		return 24
	case bits <= 31:
		return 18
	default:
		return 12
	}
}

// aesRound is the round function F_i(r): the first 8 bytes of AES-128_K(i ‖ 0^7 ‖ uint64 BE r)
// read big-endian, reduced mod 2^k. b is scratch space.
func (d *Draw) aesRound(b *roundBuf, i int, r uint64) uint64 {
	b.in = [aes.BlockSize]byte{0: byte(i)}
	binary.BigEndian.PutUint64(b.in[8:], r)
	d.block.Encrypt(b.out[:], b.in[:])
	return binary.BigEndian.Uint64(b.out[:8]) & d.mask
}

// encrypt is the Feistel network on [0, 2^(2k)): L ‖ R -> R ‖ (L xor F_i(R)) for
// i = 0..rounds-1. b is scratch space for the AES rounds (unused with tables).
func (d *Draw) encrypt(x uint64, b *roundBuf) uint64 {
	k := d.k
	l, r := x>>k, x&d.mask
	if t := d.table; t != nil {
		for i := range d.rounds {
			l, r = r, l^uint64(t[uint64(i)<<k|r])
		}
	} else {
		for i := range d.rounds {
			l, r = r, l^d.aesRound(b, i, r)
		}
	}
	return l<<k | r
}

// decrypt is the inverse of encrypt: L' ‖ R' -> (R' xor F_i(L')) ‖ L' for i = rounds-1..0.
func (d *Draw) decrypt(y uint64, b *roundBuf) uint64 {
	k := d.k
	l, r := y>>k, y&d.mask
	if t := d.table; t != nil {
		for i := d.rounds - 1; i >= 0; i-- {
			l, r = r^uint64(t[uint64(i)<<k|l]), l
		}
	} else {
		for i := d.rounds - 1; i >= 0; i-- {
			l, r = r^d.aesRound(b, i, l), l
		}
	}
	return l<<k | r
}

// N returns the number of tickets of the draw.
func (d *Draw) N() int64 { return int64(d.n) }

// Place returns the place in line (1..N) drawn for ticket number (1..N), or 0 when number is
// outside [1, N]. Place and [Draw.Number] are inverses, and Place is a bijection of [1, N].
// Expected time O(1): on average 4^k/N <= 4 passes of the Feistel network (cycle walking).
func (d *Draw) Place(number int64) int64 {
	if number < 1 || uint64(number) > d.n {
		return 0
	}
	var b *roundBuf
	if d.table == nil {
		b = roundBufs.Get().(*roundBuf)
		defer roundBufs.Put(b)
	}
	// Cycle walking (Black and Rogaway 2002, §3): apply the permutation of [0, 4^k) until the
	// result falls in [0, N).
	x := uint64(number - 1)
	for {
		if x = d.encrypt(x, b); x < d.n {
			return int64(x) + 1
		}
	}
}

// Number returns the ticket number (1..N) whose place in line is place (1..N), or 0 when place
// is outside [1, N]. It is the inverse of [Draw.Place].
func (d *Draw) Number(place int64) int64 {
	if place < 1 || uint64(place) > d.n {
		return 0
	}
	var b *roundBuf
	if d.table == nil {
		b = roundBufs.Get().(*roundBuf)
		defer roundBufs.Put(b)
	}
	y := uint64(place - 1)
	for {
		if y = d.decrypt(y, b); y < d.n {
			return int64(y) + 1
		}
	}
}

// NewSeed returns a fresh secret seed: 32 bytes from crypto/rand.
func NewSeed() []byte {
	seed := make([]byte, SeedLen)
	_, _ = rand.Read(seed) // never fails (crypto/rand, Go >= 1.24)
	return seed
}

// Commitment returns the public commitment to seed: SHA-256(seed) as 64 lower-case hex
// characters. Publish it before the opening, the seed after.
func Commitment(seed []byte) string {
	sum := sha256.Sum256(seed)
	return hex.EncodeToString(sum[:])
}

// ParseSeed decodes a seed from 64 hex characters (either case). Errors: [ErrBadSeed].
func ParseSeed(seedHex string) ([]byte, error) {
	seed, err := hex.DecodeString(seedHex)
	if err != nil || len(seed) != SeedLen {
		return nil, ErrBadSeed
	}
	return seed, nil
}

// Verify checks a revealed seed (64 hex characters) against the commitment published before
// the opening (64 hex characters, either case). Errors: [ErrBadSeed], [ErrCommitmentMismatch]
// (also for a commitment that is not 64 hex characters).
func Verify(seedHex, commitment string) error {
	seed, err := ParseSeed(seedHex)
	if err != nil {
		return err
	}
	want, err := hex.DecodeString(commitment)
	if err != nil || len(want) != sha256.Size {
		return fmt.Errorf("%w: the commitment is not 64 hex characters", ErrCommitmentMismatch)
	}
	sum := sha256.Sum256(seed)
	if subtle.ConstantTimeCompare(sum[:], want) != 1 {
		return ErrCommitmentMismatch
	}
	return nil
}
