package challenge

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"math/bits"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// solve runs the Go solver with a deadline.
func solve(t *testing.T, challenge string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sol, err := Solve(ctx, challenge)
	require.NoError(t, err)
	return sol
}

// zeroBits counts the leading zero bits of SHA-256(challenge ‖ ":" ‖ solution), independently
// of the package's code.
func zeroBits(challenge, solution string) int {
	sum := sha256.Sum256([]byte(challenge + ":" + solution))
	n := 0
	for _, b := range sum {
		if b != 0 {
			return n + bits.LeadingZeros8(b)
		}
		n += 8
	}
	return n
}

func TestIssueVerifyRoundTrip(t *testing.T) {
	is := testIssuer(t)
	c, err := is.Issue(Target{Event: "concert", Difficulty: 12}, t0.Add(500*time.Millisecond))
	require.NoError(t, err)
	require.Regexp(t, `^v1\.concert\.[0-9a-f]{32}\.12\.[0-9]+\.[A-Za-z0-9_-]{22}$`, c.String)
	require.Equal(t, "concert", c.Event)
	require.Equal(t, 12, c.Difficulty)
	require.Regexp(t, `^[0-9a-f]{32}$`, c.ID)
	require.Contains(t, c.String, "."+c.ID+".")
	require.Equal(t, t0.Add(DefaultTTL+time.Second), c.ExpiresAt, "expiry rounded up to whole seconds")
	require.Equal(t, strconv.FormatInt(c.ExpiresAt.Unix(), 10), strings.Split(c.String, ".")[4])
	require.LessOrEqual(t, len(c.String), MaxLen)

	sol := solve(t, c.String)
	require.Regexp(t, `^[0-9a-f]{16}$`, sol)
	require.GreaterOrEqual(t, zeroBits(c.String, sol), 12)
	got, err := is.Verify(c.String, sol, Target{Event: "concert"}, t0.Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, c, got)

	// The same solved challenge verifies again: single use is the caller's job.
	_, err = is.Verify(c.String, sol, Target{Event: "concert"}, t0.Add(time.Minute))
	require.NoError(t, err)

	// Ids are random.
	c2, err := is.Issue(Target{Event: "concert", Difficulty: 12}, t0)
	require.NoError(t, err)
	require.NotEqual(t, c.ID, c2.ID)

	parsed, err := Parse(c.String)
	require.NoError(t, err)
	require.Equal(t, c, parsed)
}

func TestIssueDefaultsAndErrors(t *testing.T) {
	is := testIssuer(t)
	c, err := is.Issue(Target{Event: "concert", Difficulty: 0}, t0)
	require.NoError(t, err)
	require.Equal(t, DefaultDifficulty, c.Difficulty)

	for _, ev := range []string{"", "Concert", "a.b", "a:b", strings.Repeat("a", 65), "-x"} {
		_, err := is.Issue(Target{Event: ev, Difficulty: 10}, t0)
		require.Error(t, err, "event %q", ev)
	}
	for _, d := range []int{-1, MaxDifficulty + 1, 64} {
		_, err := is.Issue(Target{Event: "concert", Difficulty: d}, t0)
		require.Error(t, err, "difficulty %d", d)
	}
	c, err = is.Issue(Target{Event: strings.Repeat("a", 64), Difficulty: MaxDifficulty}, time.Date(9999, 12, 31, 23, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	require.LessOrEqual(t, len(c.String), MaxLen)

	_, err = NewIssuer(Config{Key: []byte("short")})
	require.Error(t, err)
	_, err = NewIssuer(Config{Key: make([]byte, 16), PreviousKeys: [][]byte{make([]byte, 15)}})
	require.Error(t, err)
	_, err = NewIssuer(Config{Key: make([]byte, 16), TTL: -time.Second})
	require.Error(t, err)

	short, err := NewIssuer(Config{Key: make([]byte, 16), TTL: 1500 * time.Millisecond})
	require.NoError(t, err)
	c, err = short.Issue(Target{Event: "concert", Difficulty: 1}, t0)
	require.NoError(t, err)
	require.Equal(t, t0.Add(2*time.Second), c.ExpiresAt)
}

// TestVerifyFailures: every failure mode gives its sentinel, and each sentinel is in the
// class the HTTP layer maps (ErrRequired: 401 challenge_required, ErrFailed: 403
// challenge_failed).
func TestVerifyFailures(t *testing.T) {
	is := testIssuer(t)
	c, err := is.Issue(Target{Event: "concert", Difficulty: 10}, t0)
	require.NoError(t, err)
	sol := solve(t, c.String)
	now := t0.Add(10 * time.Second)
	require.NoError(t, firstErr(is.Verify(c.String, sol, Target{Event: "concert"}, now)))

	// A solution with too few zero bits: search the counters for one.
	var weak string
	for i := 0; ; i++ {
		s := strconv.Itoa(i)
		if zeroBits(c.String, s) < 10 {
			weak = s
			break
		}
	}
	f := strings.Split(c.String, ".")
	join := func(g []string) string { return strings.Join(g, ".") }
	with := func(i int, v string) string { g := append([]string(nil), f...); g[i] = v; return join(g) }

	other, err := NewIssuer(Config{Key: []byte("another key, 16+ bytes")})
	require.NoError(t, err)
	foreign, err := other.Issue(Target{Event: "concert", Difficulty: 10}, t0)
	require.NoError(t, err)
	forSolo, err := is.Issue(Target{Event: "solo", Difficulty: 10}, t0)
	require.NoError(t, err)

	for _, tc := range []struct {
		name            string
		challenge, sol  string
		event           string
		now             time.Time
		want, wantClass error
	}{
		{"empty challenge", "", sol, "concert", now, ErrMalformed, ErrRequired},
		{"garbage", "hello", sol, "concert", now, ErrMalformed, ErrRequired},
		{"too long", c.String + strings.Repeat("x", MaxLen), sol, "concert", now, ErrMalformed, ErrRequired},
		{"version", with(0, "v2"), sol, "concert", now, ErrMalformed, ErrRequired},
		{"bad event id", with(1, "Concert"), sol, "concert", now, ErrMalformed, ErrRequired},
		{"short id", with(2, f[2][:31]), sol, "concert", now, ErrMalformed, ErrRequired},
		{"upper-case id", with(2, strings.ToUpper(f[2])), sol, "concert", now, ErrMalformed, ErrRequired},
		{"difficulty 0", with(3, "0"), sol, "concert", now, ErrMalformed, ErrRequired},
		{"difficulty 010", with(3, "010"), sol, "concert", now, ErrMalformed, ErrRequired},
		{"difficulty too high", with(3, "41"), sol, "concert", now, ErrMalformed, ErrRequired},
		{"expiry +1", with(4, "+"+f[4]), sol, "concert", now, ErrMalformed, ErrRequired},
		{"tag not base64", with(5, strings.Repeat("*", 22)), sol, "concert", now, ErrMalformed, ErrRequired},
		{"tag short", with(5, f[5][:21]), sol, "concert", now, ErrMalformed, ErrRequired},
		{"seven fields", c.String + ".x", sol, "concert", now, ErrMalformed, ErrRequired},

		{"tampered difficulty", with(3, "1"), sol, "concert", now, ErrBadSignature, ErrFailed},
		{"tampered expiry", with(4, strconv.FormatInt(c.ExpiresAt.Unix()+3600, 10)), sol, "concert", now, ErrBadSignature, ErrFailed},
		{"tampered id", with(2, strings.Repeat("0", 32)), sol, "concert", now, ErrBadSignature, ErrFailed},
		{"tampered event", with(1, "solo"), sol, "solo", now, ErrBadSignature, ErrFailed},
		{"tampered tag", with(5, flipTag(f[5])), sol, "concert", now, ErrBadSignature, ErrFailed},
		{"other key", foreign.String, solve(t, foreign.String), "concert", now, ErrBadSignature, ErrFailed},

		{"wrong event", forSolo.String, solve(t, forSolo.String), "concert", now, ErrWrongEvent, ErrFailed},
		{"expired at expiry", c.String, sol, "concert", c.ExpiresAt, ErrExpired, ErrRequired},
		{"expired after", c.String, sol, "concert", c.ExpiresAt.Add(time.Hour), ErrExpired, ErrRequired},
		{"weak solution", c.String, weak, "concert", now, ErrBadSolution, ErrFailed},
		{"empty solution", c.String, "", "concert", now, ErrBadSolution, ErrFailed},
		{"solution with colon", c.String, ":" + sol, "concert", now, ErrBadSolution, ErrFailed},
		{"solution too long", c.String, sol + strings.Repeat("0", MaxSolutionLen), "concert", now, ErrBadSolution, ErrFailed},
		{"solution with space", c.String, sol + " ", "concert", now, ErrBadSolution, ErrFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := is.Verify(tc.challenge, tc.sol, Target{Event: tc.event}, tc.now)
			require.ErrorIs(t, err, tc.want)
			require.ErrorIs(t, err, tc.wantClass)
			other := ErrRequired
			if tc.wantClass == ErrRequired {
				other = ErrFailed
			}
			require.False(t, errors.Is(err, other), "%v is in one class only", err)
		})
	}
	// Just before expiry it still verifies.
	require.NoError(t, firstErr(is.Verify(c.String, sol, Target{Event: "concert"}, c.ExpiresAt.Add(-time.Nanosecond))))
}

// TestVerifyDifficultyAndEpoch (issue 20): a challenge verifies only at or above the least
// difficulty asked (the event's current one: a challenge issued before the operator raised it
// is refused as ErrDifficultyRaised, a 401 that sends the client for a new one), and only for
// the epoch it was issued for (the event deleted and created again: ErrBadSignature), while a
// lowered difficulty or the same epoch pass.
func TestVerifyDifficultyAndEpoch(t *testing.T) {
	is := testIssuer(t)
	life := Target{Event: "concert", Epoch: "0123456789abcdef", Difficulty: 8}
	c, err := is.Issue(life, t0)
	require.NoError(t, err)
	sol := solve(t, c.String)
	now := t0.Add(time.Second)
	require.NoError(t, firstErr(is.Verify(c.String, sol, life, now)))
	lower := life
	lower.Difficulty = 3
	require.NoError(t, firstErr(is.Verify(c.String, sol, lower, now)), "the difficulty lowered: still enough work")
	raised := life
	raised.Difficulty = 9
	_, err = is.Verify(c.String, sol, raised, now)
	require.ErrorIs(t, err, ErrDifficultyRaised)
	require.ErrorIs(t, err, ErrRequired)
	require.Contains(t, err.Error(), "the difficulty was raised")

	// The tag as the package comment writes it, computed here on its own.
	m := hmac.New(sha256.New, []byte("0123456789abcdef0123456789abcdef"))
	m.Write([]byte("waitroom challenge\x00" + life.Epoch + "\x00" + c.String[:strings.LastIndexByte(c.String, '.')]))
	require.Equal(t, base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16]), c.String[strings.LastIndexByte(c.String, '.')+1:])

	for _, epoch := range []string{"fedcba9876543210", ""} {
		again := life
		again.Epoch = epoch
		_, err = is.Verify(c.String, sol, again, now)
		require.ErrorIs(t, err, ErrBadSignature, "epoch %q: a challenge of an earlier life of the event", epoch)
	}
	for _, bad := range []string{strings.Repeat("e", MaxEpochLen+1), "a\x00b"} {
		_, err = is.Issue(Target{Event: "concert", Epoch: bad}, t0)
		require.Error(t, err)
	}
}

func flipTag(tag string) string {
	raw, err := base64.RawURLEncoding.DecodeString(tag)
	if err != nil {
		panic(err)
	}
	raw[0] ^= 1
	return base64.RawURLEncoding.EncodeToString(raw)
}

func firstErr(_ Challenge, err error) error { return err }

// TestKeyRotation: challenges signed with a previous key still verify; new ones are signed
// with the current key.
func TestKeyRotation(t *testing.T) {
	oldKey, newKey := []byte("the old key, 16+ bytes"), []byte("the new key, 16+ bytes")
	before, err := NewIssuer(Config{Key: oldKey})
	require.NoError(t, err)
	after, err := NewIssuer(Config{Key: newKey, PreviousKeys: [][]byte{oldKey}})
	require.NoError(t, err)
	onlyNew, err := NewIssuer(Config{Key: newKey})
	require.NoError(t, err)

	c, err := before.Issue(Target{Event: "concert", Difficulty: 8}, t0)
	require.NoError(t, err)
	sol := solve(t, c.String)
	require.NoError(t, firstErr(after.Verify(c.String, sol, Target{Event: "concert"}, t0)))
	_, err = onlyNew.Verify(c.String, sol, Target{Event: "concert"}, t0)
	require.ErrorIs(t, err, ErrBadSignature)

	c, err = after.Issue(Target{Event: "concert", Difficulty: 8}, t0)
	require.NoError(t, err)
	sol = solve(t, c.String)
	require.NoError(t, firstErr(onlyNew.Verify(c.String, sol, Target{Event: "concert"}, t0)))
}

func TestDeriveKey(t *testing.T) {
	k1, err := DeriveKey("test-token-key-0123456789")
	require.NoError(t, err)
	require.Len(t, k1, 32)
	k2, err := DeriveKey("test-token-key-0123456789")
	require.NoError(t, err)
	require.Equal(t, k1, k2, "deterministic: every instance derives the same key")
	k3, err := DeriveKey("test-token-key-0123456780")
	require.NoError(t, err)
	require.NotEqual(t, k1, k3)
	_, err = DeriveKey("too short")
	require.Error(t, err)
}

// TestSolveDistribution: over many solves at difficulty 8, every solution verifies and the
// mean number of hashes is near 2^8 (the geometric distribution's mean).
func TestSolveDistribution(t *testing.T) {
	is := testIssuer(t)
	const runs = 400
	var total uint64
	for range runs {
		c, err := is.Issue(Target{Event: "concert", Difficulty: 8}, t0)
		require.NoError(t, err)
		s := newSolver(c.String)
		var ctr uint64
		for {
			sol, ok := s.search(ctr, 1, 8)
			ctr++
			if ok {
				require.GreaterOrEqual(t, zeroBits(c.String, sol), 8)
				_, err := is.Verify(c.String, sol, Target{Event: "concert"}, t0)
				require.NoError(t, err)
				break
			}
		}
		total += ctr
	}
	mean := float64(total) / runs
	t.Logf("difficulty 8: mean %.1f hashes over %d solves (expected 256)", mean, runs)
	// The mean of 400 geometric draws with mean 256 has a standard deviation of about 12.8.
	require.InDelta(t, 256, mean, 6*12.8)
}

func TestSolveCancelAndMalformed(t *testing.T) {
	is := testIssuer(t)
	c, err := is.Issue(Target{Event: "concert", Difficulty: MaxDifficulty}, t0)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Solve(ctx, c.String)
	require.ErrorIs(t, err, context.Canceled)

	_, err = Solve(context.Background(), "nonsense")
	require.ErrorIs(t, err, ErrMalformed)
}

// TestLongChallengeSolves: the solver's midstate path with a challenge that spans several
// blocks (a 64-character event id).
func TestLongChallengeSolves(t *testing.T) {
	is := testIssuer(t)
	ev := strings.Repeat("e", 64)
	c, err := is.Issue(Target{Event: ev, Difficulty: 10}, t0)
	require.NoError(t, err)
	require.Greater(t, len(c.String)+1, 128)
	sol := solve(t, c.String)
	_, err = is.Verify(c.String, sol, Target{Event: ev}, t0)
	require.NoError(t, err)
}

func TestDocFigures(t *testing.T) {
	// docs/challenge.md states the default difficulty; keep it true.
	doc := readDoc(t)
	m := regexp.MustCompile("default difficulty is \\*\\*(\\d+)\\*\\*").FindStringSubmatch(doc)
	require.NotNil(t, m, "docs/challenge.md names the default difficulty")
	require.Equal(t, strconv.Itoa(DefaultDifficulty), m[1])
}

// BenchmarkVerify is the server's cost of checking a solved challenge: one HMAC-SHA256 and
// one SHA-256.
func BenchmarkVerify(b *testing.B) {
	is := testIssuer(b)
	c, err := is.Issue(Target{Event: "concert", Difficulty: 8}, t0)
	require.NoError(b, err)
	sol, err := Solve(context.Background(), c.String)
	require.NoError(b, err)
	b.ReportAllocs()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu0 := threadCPU(b)
	for b.Loop() {
		if _, err := is.Verify(c.String, sol, Target{Event: "concert"}, t0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((threadCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}
