package draw

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testSeed returns a fixed seed derived from label: SHA-256(label).
func testSeed(label string) []byte {
	s := sha256.Sum256([]byte(label))
	return s[:]
}

// seqSeed is the seed 00 01 02 ... 1f of the worked example of docs/draw.md.
func seqSeed() []byte {
	s := make([]byte, SeedLen)
	for i := range s {
		s[i] = byte(i)
	}
	return s
}

// TestBijectionExhaustive checks, for every N in 1..2000 (1..500 with -short) and three
// seeds, that Place maps [1, N] onto [1, N] one to one, that Number is its inverse, and that
// numbers and places outside [1, N] give 0.
func TestBijectionExhaustive(t *testing.T) {
	maxN := int64(2000)
	if testing.Short() {
		maxN = 500
	}
	seeds := [][]byte{seqSeed(), bytes.Repeat([]byte{0xff}, SeedLen), testSeed("waitroom")}
	for si, seed := range seeds {
		seen := make([]int32, maxN+1) // seen[p] = the n whose loop last saw place p
		for n := int64(1); n <= maxN; n++ {
			d, err := New(seed, n)
			require.NoError(t, err)
			require.Equal(t, n, d.N())
			for x := int64(1); x <= n; x++ {
				p := d.Place(x)
				if p < 1 || p > n {
					t.Fatalf("seed %d, N=%d: Place(%d) = %d, outside [1, N]", si, n, x, p)
				}
				if seen[p] == int32(n) {
					t.Fatalf("seed %d, N=%d: place %d drawn twice (second for number %d)", si, n, p, x)
				}
				seen[p] = int32(n)
				if back := d.Number(p); back != x {
					t.Fatalf("seed %d, N=%d: Number(Place(%d) = %d) = %d", si, n, x, p, back)
				}
			}
			for _, out := range []int64{0, -1, n + 1, math.MaxInt64, math.MinInt64} {
				if d.Place(out) != 0 || d.Number(out) != 0 {
					t.Fatalf("seed %d, N=%d: Place/Number(%d) = %d/%d, want 0", si, n, out, d.Place(out), d.Number(out))
				}
			}
		}
	}
}

// TestTablesMatchAES: the tabulated round functions New uses give exactly the draw of AES in
// every round, and the AES path (N > 2^28) is a bijection on what is sampled.
func TestTablesMatchAES(t *testing.T) {
	seed := testSeed("tables")
	for _, n := range []int64{1, 2, 5, 17, 1000, 65_537, 1_000_000, 1 << 28} {
		tab, err := New(seed, n)
		require.NoError(t, err)
		require.NotNil(t, tab.table, "N=%d is tabulated", n)
		plain, err := newDraw(seed, n, false)
		require.NoError(t, err)
		for x := int64(1); x <= n; x += 1 + n/3000 {
			require.Equal(t, plain.Place(x), tab.Place(x), "N=%d Place(%d)", n, x)
			require.Equal(t, plain.Number(x), tab.Number(x), "N=%d Number(%d)", n, x)
		}
	}
	for _, n := range []int64{1<<28 + 1, 1 << 40, MaxN} {
		d, err := New(seed, n)
		require.NoError(t, err)
		require.Nil(t, d.table, "N=%d runs AES in every round", n)
		for _, x := range []int64{1, 2, 3, n / 2, n - 1, n} {
			p := d.Place(x)
			require.True(t, p >= 1 && p <= n, "N=%d Place(%d) = %d", n, x, p)
			require.Equal(t, x, d.Number(p), "N=%d", n)
		}
	}
}

func TestNewErrors(t *testing.T) {
	_, err := New(make([]byte, 31), 10)
	require.ErrorIs(t, err, ErrBadSeed)
	_, err = New(nil, 10)
	require.ErrorIs(t, err, ErrBadSeed)
	for _, n := range []int64{0, -5, MaxN + 1, math.MaxInt64} {
		_, err = New(seqSeed(), n)
		require.ErrorIs(t, err, ErrBadN, "n=%d", n)
	}
}

// TestDomain checks the half width and round count against the definitions of docs/draw.md.
func TestDomain(t *testing.T) {
	for _, tc := range []struct {
		n      int64
		k      uint
		rounds int
	}{
		{1, 1, 36}, {4, 1, 36}, {5, 2, 36}, {16, 2, 36}, {17, 3, 36}, {256, 4, 36}, {257, 5, 30},
		{4096, 6, 30}, {4097, 7, 24}, {100_000, 9, 24}, {262_144, 9, 24}, {262_145, 10, 18},
		{1_000_000, 10, 18}, {1 << 30, 15, 18}, {1<<30 + 1, 16, 12}, {MaxN, 31, 12},
	} {
		d, err := New(seqSeed(), tc.n)
		require.NoError(t, err)
		require.Equal(t, tc.k, d.k, "N=%d", tc.n)
		require.Equal(t, tc.rounds, d.rounds, "N=%d", tc.n)
	}
}

// TestDrawDependsOnN: the key is derived with N, so draws of different sizes are unrelated
// rather than prefixes of one another.
func TestDrawDependsOnN(t *testing.T) {
	a, err := New(seqSeed(), 1000)
	require.NoError(t, err)
	b, err := New(seqSeed(), 1001)
	require.NoError(t, err)
	same := 0
	for x := int64(1); x <= 1000; x++ {
		if a.Place(x) == b.Place(x) {
			same++
		}
	}
	require.Less(t, same, 10, "about 1 in 1000 places coincide by chance")
}

func TestCommitmentVerify(t *testing.T) {
	seed := NewSeed()
	require.Len(t, seed, SeedLen)
	require.NotEqual(t, seed, NewSeed())
	c := Commitment(seed)
	require.Regexp(t, `^[0-9a-f]{64}$`, c)
	sum := sha256.Sum256(seed)
	require.Equal(t, hex.EncodeToString(sum[:]), c)

	seedHex := hex.EncodeToString(seed)
	require.NoError(t, Verify(seedHex, c))
	require.NoError(t, Verify(strings.ToUpper(seedHex), strings.ToUpper(c)), "hex in either case")

	other := NewSeed()
	require.ErrorIs(t, Verify(hex.EncodeToString(other), c), ErrCommitmentMismatch)
	flipped := []byte(c)
	flipped[10] ^= 1
	require.ErrorIs(t, Verify(seedHex, string(flipped)), ErrCommitmentMismatch)
	require.ErrorIs(t, Verify(seedHex, c[:62]), ErrCommitmentMismatch)
	require.ErrorIs(t, Verify(seedHex, "zz"+c[2:]), ErrCommitmentMismatch)
	require.ErrorIs(t, Verify(seedHex[:62], c), ErrBadSeed)
	require.ErrorIs(t, Verify("xy"+seedHex[2:], c), ErrBadSeed)
	require.ErrorIs(t, Verify("", c), ErrBadSeed)

	parsed, err := ParseSeed(seedHex)
	require.NoError(t, err)
	require.Equal(t, seed, parsed)
}

// TestDocExample recomputes the worked example of docs/draw.md from the numbers written there:
// the commitment, the AES key, the first round function values, and the ten places.
func TestDocExample(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "draw.md"))
	require.NoError(t, err)
	field := func(name string) string {
		t.Helper()
		m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(name) + `\s*=\s*(.+?)\s*$`).FindSubmatch(doc)
		require.NotNil(t, m, "docs/draw.md has no %q line in its example", name)
		return string(m[1])
	}
	seedHex := field("seed")
	seed, err := ParseSeed(seedHex)
	require.NoError(t, err)
	require.Equal(t, seqSeed(), seed)
	n, err := strconv.ParseInt(field("N"), 10, 64)
	require.NoError(t, err)
	require.Equal(t, Commitment(seed), field("commitment"))

	d, err := New(seed, n)
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(int(d.k)), field("k"))
	require.Equal(t, strconv.Itoa(d.rounds), field("rounds"))

	key := make([]byte, 16)
	require.NoError(t, hkdfKey(seed, n, key))
	require.Equal(t, hex.EncodeToString(key), field("key"))

	var b roundBuf
	for i := range 3 {
		var got []string
		for r := range uint64(1) << d.k {
			got = append(got, strconv.FormatUint(d.aesRound(&b, i, r), 10))
		}
		require.Equal(t, strings.Join(got, ","), field("F_"+strconv.Itoa(i)+"(0..3)"), "round %d", i)
	}

	var places []string
	for x := int64(1); x <= n; x++ {
		places = append(places, strconv.FormatInt(d.Place(x), 10))
	}
	require.Equal(t, strings.Join(places, " "), field("places of numbers 1..10"))
	t.Logf("docs/draw.md example: N=%d places %s", n, strings.Join(places, " "))
}

// TestNodeReference runs the JavaScript reference implementation printed in docs/draw.md
// (Node.js, its own HKDF and AES) and compares every place with the Go draw. It is skipped
// when node is not installed.
func TestNodeReference(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "draw.md"))
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)```js\n(.*?)```").FindSubmatch(doc)
	require.NotNil(t, m, "docs/draw.md holds the reference implementation in a ```js block")
	script := filepath.Join(t.TempDir(), "draw.mjs")
	require.NoError(t, os.WriteFile(script, m[1], 0o644))

	for _, tc := range []struct {
		seed []byte
		n    int64
	}{{seqSeed(), 10}, {testSeed("node"), 1}, {testSeed("node"), 777}, {testSeed("node 2"), 3000}} {
		out, err := exec.Command(node, script, hex.EncodeToString(tc.seed), strconv.FormatInt(tc.n, 10)).Output()
		require.NoError(t, err)
		d, err := New(tc.seed, tc.n)
		require.NoError(t, err)
		var want strings.Builder
		for x := int64(1); x <= tc.n; x++ {
			want.WriteString(strconv.FormatInt(x, 10) + " " + strconv.FormatInt(d.Place(x), 10) + "\n")
		}
		require.Equal(t, want.String(), string(out), "N=%d", tc.n)
	}
}

// hkdfKey recomputes the AES key as docs/draw.md spells HKDF out: PRK = HMAC-SHA256(32 zero
// bytes, seed), key = first 16 bytes of HMAC-SHA256(PRK, info ‖ 0x01).
func hkdfKey(seed []byte, n int64, out []byte) error {
	prk := hmacSHA256(make([]byte, sha256.Size), seed)
	info := binary.BigEndian.AppendUint64([]byte("waitroom draw v1"), uint64(n))
	t1 := hmacSHA256(prk, append(info, 1))
	if copy(out, t1) != 16 {
		return errors.New("short key")
	}
	return nil
}

// TestUniformChiSquare: over many seeds, the place of a fixed ticket number is uniform over
// the N places, and the places of two fixed numbers are uniform over the N(N-1) ordered pairs.
// Seeds are SHA-256("chi-square " ‖ i), so the test is deterministic; it fails when the
// p-value of the chi-square statistic is below 0.001.
func TestUniformChiSquare(t *testing.T) {
	const seeds = 20_000
	for _, n := range []int64{10, 16} { // 16 = 4^2: no cycle walking at all
		single := make([]float64, n)
		pairs := make([]float64, n*n)
		for i := range seeds {
			d, err := New(testSeed("chi-square "+strconv.Itoa(i)), n)
			require.NoError(t, err)
			p1, p2 := d.Place(1), d.Place(n)
			single[p1-1]++
			pairs[(p1-1)*n+(p2-1)]++
		}
		stat, df := chiSquare(single, float64(seeds)/float64(n), nil)
		p := chiSquareSurvival(stat, df)
		t.Logf("N=%d, place of number 1 over %d seeds: chi2 = %.2f, df = %d, p = %.4f", n, seeds, stat, df, p)
		require.Greater(t, p, 0.001, "N=%d: the place of number 1 is not uniform", n)

		diagonal := func(i int) bool { return int64(i)/n == int64(i)%n }
		stat, df = chiSquare(pairs, float64(seeds)/float64(n*(n-1)), diagonal)
		p = chiSquareSurvival(stat, df)
		t.Logf("N=%d, places of numbers (1, %d) over %d seeds: chi2 = %.2f, df = %d, p = %.4f", n, n, seeds, stat, df, p)
		require.Greater(t, p, 0.001, "N=%d: the places of two numbers are not uniform pairs", n)
		for i := range pairs {
			if diagonal(i) {
				require.Zero(t, pairs[i], "two numbers never share a place")
			}
		}
	}
}

// chiSquare returns Pearson's statistic of counts against a uniform expectation, skipping the
// cells for which skip is true, and its degrees of freedom (cells - 1).
func chiSquare(counts []float64, expected float64, skip func(int) bool) (float64, int) {
	var stat float64
	cells := 0
	for i, c := range counts {
		if skip != nil && skip(i) {
			continue
		}
		stat += (c - expected) * (c - expected) / expected
		cells++
	}
	return stat, cells - 1
}

// chiSquareSurvival is P(X >= x) for X chi-square with df degrees of freedom: the regularized
// upper incomplete gamma function Q(df/2, x/2), by its series (x < a+1) or continued fraction
// (W. H. Press et al., Numerical Recipes, 3rd ed., §6.2).
func chiSquareSurvival(x float64, df int) float64 {
	a, z := float64(df)/2, x/2
	if z <= 0 {
		return 1
	}
	lg, _ := math.Lgamma(a)
	if z < a+1 {
		sum, term := 1/a, 1/a
		for n := 1; n < 1000; n++ {
			term *= z / (a + float64(n))
			sum += term
			if term < sum*1e-15 {
				break
			}
		}
		return 1 - sum*math.Exp(-z+a*math.Log(z)-lg)
	}
	const tiny = 1e-300
	b := z + 1 - a
	c, d := 1/tiny, 1/b
	h := d
	for i := 1; i < 1000; i++ {
		an := -float64(i) * (float64(i) - a)
		b += 2
		d = an*d + b
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = b + an/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < 1e-15 {
			break
		}
	}
	return math.Exp(-z+a*math.Log(z)-lg) * h
}

func TestChiSquareSurvival(t *testing.T) {
	// Critical values at p = 0.001 from standard tables (NIST/SEMATECH e-Handbook of
	// Statistical Methods, §1.3.6.7.4).
	require.InDelta(t, 0.001, chiSquareSurvival(27.877, 9), 2e-6)
	require.InDelta(t, 0.001, chiSquareSurvival(29.588, 10), 2e-6)
	require.InDelta(t, 0.5, chiSquareSurvival(8.343, 9), 1e-3)
	require.InDelta(t, 0.001, chiSquareSurvival(149.449, 100), 2e-6)
}

func hmacSHA256(key, msg []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return m.Sum(nil)
}
