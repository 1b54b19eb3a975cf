// Package challenge is a proof-of-work challenge (hashcash-style, A. Back, "Hashcash - A
// Denial of Service Counter-Measure", 2002) that a client solves before it may join a line:
// a phone spends about a second of CPU on it, a bot pays the same per ticket, and the server
// checks it with one HMAC and one SHA-256.
//
// A challenge is a self-contained signed string (no server state until it is used):
//
//	v1.<event>.<id>.<difficulty>.<expires>.<tag>
//
//	event       the event id (^[a-z0-9][a-z0-9_-]{0,63}$, see event.ValidID)
//	id          16 random bytes as 32 lower-case hex characters, for single use
//	difficulty  leading zero bits the work must show, decimal, 1..MaxDifficulty
//	expires     expiry, Unix seconds, decimal
//	tag         base64url without padding (RFC 4648 §5) of the first 16 bytes of
//	            HMAC-SHA256(key, "waitroom challenge\x00" ‖ epoch ‖ "\x00" ‖ everything
//	            before ".<tag>")
//
// epoch names the life of the event the challenge was issued in ([Target.Epoch]: it changes
// when the event is deleted and created again). It is bound by the tag but not written in the
// string, so a challenge of an earlier life of the event fails its tag ([ErrBadSignature]) and
// the used challenges a deleted event's line forgot cannot be used again.
//
// A solution is a string of 1..64 characters from [A-Za-z0-9_-] such that
// SHA-256(challenge ‖ ":" ‖ solution) starts with at least difficulty zero bits. Finding one
// takes 2^difficulty hashes on average; checking it takes one. [Solve] is the Go solver;
// internal/web/assets/pow-worker.js is the browser's (a Web Worker). docs/challenge.md has the
// calibration of the default difficulty.
//
// Single use is NOT enforced here: [Issuer.Verify] accepts the same solved challenge any number
// of times until it expires. The caller must record [Challenge.ID] until [Challenge.ExpiresAt]
// (e.g. SET NX with that expiry) and refuse an ID it has seen.
package challenge

import (
	"cmp"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/waitroom/waitroom/internal/event"
)

// Limits and defaults.
const (
	// DefaultDifficulty is the difficulty [Issuer.Issue] uses for 0: 2^19 = 524,288 hashes on
	// average, about a second on a mid-range phone (docs/challenge.md). It is an event's
	// default too (event.DefaultChallengeDifficulty, where it is defined).
	DefaultDifficulty = event.DefaultChallengeDifficulty
	// MaxDifficulty bounds the difficulty: 2^40 hashes is hours even for native code.
	MaxDifficulty = event.MaxChallengeDifficulty
	// DefaultTTL is how long a challenge stays valid when Config.TTL is zero: 120 s, a hundred
	// times the expected solving time of the default difficulty on a mid-range phone.
	DefaultTTL = 120 * time.Second
	// MinKeyLen is the minimum length of a signing key in bytes.
	MinKeyLen = 16
	// MaxSolutionLen is the longest solution accepted, in bytes.
	MaxSolutionLen = 64
	// MaxLen is the longest challenge string [Issuer.Issue] can produce (a 64-character event
	// id and the largest expiry): longer input is malformed before any other work.
	MaxLen = len("v1.") + 64 + 1 + 32 + 1 + 2 + 1 + 19 + 1 + tagB64Len
	// MaxEpochLen is the longest Target.Epoch (event.Event.Epoch gives 16 hex characters).
	MaxEpochLen = 64
)

const (
	version   = "v1"
	macPrefix = "waitroom challenge\x00"
	tagLen    = 16
	tagB64Len = 22 // base64 of 16 bytes, no padding
	// keyInfo is the HKDF "info" (RFC 5869 §3.2) of the signing key; see DeriveKey.
	keyInfo = "waitroom challenge v1"
)

// tagB64Enc is strict so that exactly one string encodes each tag.
var tagB64Enc = base64.RawURLEncoding.Strict()

// Errors. Every error of [Issuer.Verify] is one of the six below, each of which also matches
// one of the two classes with errors.Is:
//
//   - [ErrRequired] (HTTP 401, problem code "challenge_required": fetch a new challenge):
//     [ErrMalformed], [ErrExpired], [ErrDifficultyRaised];
//   - [ErrFailed] (HTTP 403, problem code "challenge_failed"): [ErrBadSignature],
//     [ErrWrongEvent], [ErrBadSolution].
var (
	ErrRequired = errors.New("challenge: a valid challenge is required")
	ErrFailed   = errors.New("challenge: failed")

	// ErrMalformed: the challenge string is empty or not of the form above.
	ErrMalformed = fmt.Errorf("%w: malformed challenge", ErrRequired)
	// ErrExpired: an authentic challenge whose expiry has passed (expires <= now).
	ErrExpired = fmt.Errorf("%w: challenge expired", ErrRequired)
	// ErrDifficultyRaised: an authentic challenge issued at a lower difficulty than the
	// event's current one (the operator raised it since).
	ErrDifficultyRaised = fmt.Errorf("%w: the difficulty was raised", ErrRequired)
	// ErrBadSignature: the tag does not match under any configured key (tampered, forged, or
	// issued for an earlier life of the event: see Target.Epoch).
	ErrBadSignature = fmt.Errorf("%w: bad challenge signature", ErrFailed)
	// ErrWrongEvent: a challenge that names another event.
	ErrWrongEvent = fmt.Errorf("%w: challenge issued for another event", ErrFailed)
	// ErrBadSolution: the solution is not 1..64 characters of [A-Za-z0-9_-] or does not show
	// the work.
	ErrBadSolution = fmt.Errorf("%w: the solution does not solve the challenge", ErrFailed)
)

// Challenge is an issued challenge.
type Challenge struct {
	String     string    // the challenge string, as sent to the client
	Event      string    // event id
	ID         string    // 32 lower-case hex characters (128 random bits): the single-use key
	Difficulty int       // leading zero bits required, 1..MaxDifficulty
	ExpiresAt  time.Time // whole seconds, UTC; the challenge is valid while now < ExpiresAt
}

// Target is what a challenge is for.
type Target struct {
	// Event is the event id.
	Event string
	// Epoch names the life of the event (event.Event.Epoch; "" for none), at most MaxEpochLen
	// bytes without NUL: a challenge verifies only for the epoch it was issued for.
	Epoch string
	// Difficulty: for [Issuer.Issue], the difficulty of the new challenge (0 =
	// DefaultDifficulty); for [Issuer.Verify], the least difficulty accepted, the event's
	// current one (0 = any).
	Difficulty int
}

// Config configures an [Issuer].
type Config struct {
	// Key signs new challenges (HMAC-SHA256), at least MinKeyLen bytes; see [DeriveKey].
	Key []byte
	// PreviousKeys still verify challenges (key rotation); tried after Key.
	PreviousKeys [][]byte
	// TTL is the validity of a new challenge, whole seconds (rounded up). Defaults to DefaultTTL.
	TTL time.Duration
}

// Issuer issues and verifies challenges. It is safe for concurrent use.
type Issuer struct {
	ttl  time.Duration
	macs []*sync.Pool // of *mac, Key first
}

// mac is a keyed HMAC-SHA256 with scratch space, pooled so that a tag costs no allocation.
type mac struct {
	h   hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

// DeriveKey derives the challenge signing key (32 bytes) from the operator secret
// WAITROOM_TOKEN_KEY, as package token derives its keys: HKDF-SHA256 (RFC 5869), no salt,
// info "waitroom challenge v1". Errors: the secret is shorter than 16 bytes.
func DeriveKey(secret string) ([]byte, error) {
	if len(secret) < MinKeyLen {
		return nil, fmt.Errorf("challenge: secret must be at least %d bytes", MinKeyLen)
	}
	key, err := hkdf.Key(sha256.New, []byte(secret), nil, keyInfo, 32)
	if err != nil {
		return nil, fmt.Errorf("challenge: hkdf: %w", err) // unreachable: 32 <= 255*32 bytes
	}
	return key, nil
}

// NewIssuer returns an Issuer. The keys are copied. Errors: a key shorter than MinKeyLen, a
// negative TTL.
func NewIssuer(cfg Config) (*Issuer, error) {
	if cfg.TTL < 0 {
		return nil, errors.New("challenge: negative TTL")
	}
	cfg.TTL = cmp.Or(cfg.TTL, DefaultTTL)
	is := &Issuer{ttl: cfg.TTL}
	for i, k := range append([][]byte{cfg.Key}, cfg.PreviousKeys...) {
		if len(k) < MinKeyLen {
			return nil, fmt.Errorf("challenge: key %d is shorter than %d bytes", i, MinKeyLen)
		}
		key := append([]byte(nil), k...)
		is.macs = append(is.macs, &sync.Pool{New: func() any {
			return &mac{h: hmac.New(sha256.New, key), buf: make([]byte, 0, len(macPrefix)+MaxEpochLen+1+MaxLen)}
		}})
	}
	return is, nil
}

// Issue returns a new challenge for t: t.Event in its life t.Epoch, with t.Difficulty leading
// zero bits (0 means DefaultDifficulty), valid from now for the Issuer's TTL. Errors: an
// invalid event id, a difficulty outside 0..MaxDifficulty, an epoch longer than MaxEpochLen or
// with a NUL byte.
func (is *Issuer) Issue(t Target, now time.Time) (Challenge, error) {
	eventID, difficulty := t.Event, t.Difficulty
	if !event.ValidID(eventID) {
		return Challenge{}, fmt.Errorf("challenge: invalid event id %q", eventID)
	}
	if len(t.Epoch) > MaxEpochLen || strings.IndexByte(t.Epoch, 0) >= 0 {
		return Challenge{}, fmt.Errorf("challenge: invalid epoch %q", t.Epoch)
	}
	if difficulty == 0 {
		difficulty = DefaultDifficulty
	}
	if difficulty < 1 || difficulty > MaxDifficulty {
		return Challenge{}, fmt.Errorf("challenge: difficulty %d outside 1..%d", difficulty, MaxDifficulty)
	}
	exp := now.Add(is.ttl)
	expS := exp.Unix()
	if exp.Nanosecond() != 0 {
		expS++
	}
	var id [16]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand, Go >= 1.24)

	b := make([]byte, 0, MaxLen)
	b = append(b, version+"."...)
	b = append(b, eventID...)
	b = append(b, '.')
	b = hex.AppendEncode(b, id[:])
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(difficulty), 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, expS, 10)
	var tag [tagLen]byte
	is.tag(0, tag[:], t.Epoch, string(b))
	b = append(b, '.')
	b = base64.RawURLEncoding.AppendEncode(b, tag[:])
	return Challenge{String: string(b), Event: eventID, ID: hex.EncodeToString(id[:]),
		Difficulty: difficulty, ExpiresAt: time.Unix(expS, 0).UTC()}, nil
}

// tag writes the tag of body in epoch under key i into dst (16 bytes).
func (is *Issuer) tag(i int, dst []byte, epoch, body string) {
	m := is.macs[i].Get().(*mac)
	m.buf = append(append(append(append(m.buf[:0], macPrefix...), epoch...), 0), body...)
	m.h.Reset()
	m.h.Write(m.buf)
	copy(dst, m.h.Sum(m.sum[:0]))
	is.macs[i].Put(m)
}

// Verify checks that solution solves challenge, an authentic, unexpired challenge issued for
// t.Event in its life t.Epoch at t.Difficulty or more, and returns the challenge (whose ID the
// caller must record until ExpiresAt: single use is not enforced here). It does one
// HMAC-SHA256 (one per configured key when the tag does not match the current key) and one
// SHA-256. The checks run in this order, the first failing one giving the error: form
// ([ErrMalformed]), event ([ErrWrongEvent]: the string names another; checked before the tag,
// which binds the event's epoch and so could not match), tag ([ErrBadSignature]; a challenge of
// another epoch fails here), expiry ([ErrExpired]), difficulty ([ErrDifficultyRaised]), work
// ([ErrBadSolution]).
func (is *Issuer) Verify(challenge, solution string, t Target, now time.Time) (Challenge, error) {
	c, body, tagB64, err := parse(challenge)
	if err != nil {
		return Challenge{}, err
	}
	if c.Event != t.Event {
		return Challenge{}, ErrWrongEvent
	}
	var want [tagLen]byte
	var tb [tagB64Len]byte
	if n, err := tagB64Enc.Decode(want[:], append(tb[:0], tagB64...)); err != nil || n != tagLen {
		return Challenge{}, ErrMalformed
	}
	ok := false
	var got [tagLen]byte
	for i := range is.macs {
		is.tag(i, got[:], t.Epoch, body)
		if hmac.Equal(got[:], want[:]) {
			ok = true
			break
		}
	}
	switch {
	case !ok:
		return Challenge{}, ErrBadSignature
	case !now.Before(c.ExpiresAt):
		return Challenge{}, ErrExpired
	case c.Difficulty < t.Difficulty:
		return Challenge{}, ErrDifficultyRaised
	case !validSolution(solution) || !Solves(challenge, solution, c.Difficulty):
		return Challenge{}, ErrBadSolution
	}
	return c, nil
}

// Parse reads a challenge string without checking its tag or expiry: what a client needs to
// know (difficulty, expiry) before solving it. Errors: [ErrMalformed].
func Parse(challenge string) (Challenge, error) {
	c, _, _, err := parse(challenge)
	return c, err
}

// parse splits challenge into its fields, strictly (exactly one string per challenge), and
// returns the challenge, the signed body and the tag's text.
func parse(s string) (c Challenge, body, tag string, err error) {
	if len(s) > MaxLen {
		return c, "", "", ErrMalformed
	}
	var f [6]string
	rest := s
	for i := range 5 {
		j := strings.IndexByte(rest, '.')
		if j < 0 {
			return c, "", "", ErrMalformed
		}
		f[i], rest = rest[:j], rest[j+1:]
	}
	f[5] = rest
	if f[0] != version || !event.ValidID(f[1]) || len(f[2]) != 32 || len(f[5]) != tagB64Len {
		return c, "", "", ErrMalformed
	}
	for i := 0; i < len(f[2]); i++ {
		if ch := f[2][i]; (ch < '0' || ch > '9') && (ch < 'a' || ch > 'f') {
			return c, "", "", ErrMalformed
		}
	}
	d, ok := canonicalInt(f[3])
	if !ok || d < 1 || d > MaxDifficulty {
		return c, "", "", ErrMalformed
	}
	exp, ok := canonicalInt(f[4])
	if !ok || exp < 1 {
		return c, "", "", ErrMalformed
	}
	c = Challenge{String: s, Event: f[1], ID: f[2], Difficulty: int(d), ExpiresAt: time.Unix(exp, 0).UTC()}
	return c, s[:len(s)-tagB64Len-1], f[5], nil
}

// canonicalInt parses a non-negative decimal without sign or leading zeros, at most 19 digits.
func canonicalInt(s string) (int64, bool) {
	if s == "" || len(s) > 19 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}

// validSolution reports whether s is 1..MaxSolutionLen characters of [A-Za-z0-9_-].
func validSolution(s string) bool {
	if len(s) == 0 || len(s) > MaxSolutionLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; {
		case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9', ch == '_', ch == '-':
		default:
			return false
		}
	}
	return true
}

// Solves reports whether SHA-256(challenge ‖ ":" ‖ solution) starts with at least difficulty
// zero bits (difficulty <= 64). It is the work check of [Issuer.Verify], without the
// signature: one SHA-256, no allocation for challenges up to MaxLen.
func Solves(challenge, solution string, difficulty int) bool {
	var buf [MaxLen + 1 + MaxSolutionLen]byte
	msg := append(buf[:0], challenge...)
	msg = append(msg, ':')
	msg = append(msg, solution...)
	sum := sha256.Sum256(msg)
	return leadingZeros(&sum) >= difficulty
}

// leadingZeros counts the leading zero bits of the first 64 bits of sum.
func leadingZeros(sum *[sha256.Size]byte) int {
	return bits.LeadingZeros64(binary.BigEndian.Uint64(sum[:8]))
}
