package challenge

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"hash"
)

// solutionLen is the length of the solutions the solvers produce: 16 lower-case hex digits
// (a 64-bit counter starting at a random value).
const solutionLen = 16

// ctxCheckEvery is how many hashes Solve tries between looks at its context.
const ctxCheckEvery = 1 << 14

// Solve finds a solution to challenge: 16 lower-case hex digits, counting up from a random
// 64-bit start. It runs on the calling goroutine (callers solving many challenges parallelize
// across them) and takes 2^difficulty hashes on average (docs/challenge.md has the rates).
// It does not check the tag or the expiry. Errors: [ErrMalformed], or ctx's error when ctx
// ends first.
func Solve(ctx context.Context, challenge string) (string, error) {
	c, err := Parse(challenge)
	if err != nil {
		return "", err
	}
	var start [8]byte
	_, _ = rand.Read(start[:]) // never fails (crypto/rand, Go >= 1.24)
	s := newSolver(challenge)
	ctr := binary.BigEndian.Uint64(start[:])
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		if sol, ok := s.search(ctr, ctxCheckEvery, c.Difficulty); ok {
			return sol, nil
		}
		ctr += ctxCheckEvery
	}
}

// solver hashes challenge ‖ ":" ‖ 16 hex digits, resuming SHA-256 from the state after the
// message's whole 64-byte blocks that precede the digits, so that each try compresses only
// the last block or two.
type solver struct {
	mid  []byte // marshaled SHA-256 state after the fixed blocks
	h    hash.Hash
	tail []byte // the rest of the prefix, then the 16 digits
	off  int    // index of the digits in tail
	sum  [sha256.Size]byte
}

func newSolver(challenge string) *solver {
	prefix := challenge + ":"
	fixed := len(prefix) / sha256.BlockSize * sha256.BlockSize
	h := sha256.New()
	h.Write([]byte(prefix[:fixed]))
	mid, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		panic("challenge: sha256 state: " + err.Error()) // crypto/sha256 always marshals
	}
	tail := make([]byte, 0, sha256.BlockSize+solutionLen)
	tail = append(tail, prefix[fixed:]...)
	off := len(tail)
	tail = tail[:off+solutionLen]
	return &solver{mid: mid, h: h, tail: tail, off: off}
}

const hexDigits = "0123456789abcdef"

// search tries the counters ctr, ctr+1, ... ctr+tries-1 and returns the first solution with
// at least difficulty leading zero bits.
func (s *solver) search(ctr uint64, tries int, difficulty int) (string, bool) {
	um := s.h.(encoding.BinaryUnmarshaler)
	digits := s.tail[s.off:]
	for range tries {
		for i := solutionLen - 1; i >= 0; i-- {
			digits[i] = hexDigits[(ctr>>(4*(solutionLen-1-i)))&0xf]
		}
		if err := um.UnmarshalBinary(s.mid); err != nil {
			panic("challenge: sha256 state: " + err.Error()) // it was marshaled by the same type
		}
		s.h.Write(s.tail)
		if leadingZeros((*[sha256.Size]byte)(s.h.Sum(s.sum[:0]))) >= difficulty {
			return string(digits), true
		}
		ctr++
	}
	return "", false
}
