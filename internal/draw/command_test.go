package draw

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// run runs the verify-draw command and returns its exit status, stdout and stderr.
func run(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Command(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestCommandRecomputes100k prints the 100,000 places of a draw through the command, checks
// each against Place, writes them to a file, and has the command check the file (exit 0); the
// same lines from standard input; then a file with two places swapped and a number out of
// range (exit 1, mismatches listed).
func TestCommandRecomputes100k(t *testing.T) {
	const n = 100_000
	seed := testSeed("verify-draw")
	seedHex, commitment := hex.EncodeToString(seed), Commitment(seed)
	d, err := New(seed, n)
	require.NoError(t, err)

	code, out, errOut := run(t, "", "--seed", seedHex, "--commitment", commitment, "--n", strconv.Itoa(n))
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, n)
	seen := make([]bool, n+1)
	for i, line := range lines {
		var x, p int64
		_, err := fmt.Sscanf(line, "%d %d", &x, &p)
		require.NoError(t, err, "line %q", line)
		require.Equal(t, int64(i+1), x)
		require.Equal(t, d.Place(x), p, "number %d", x)
		require.False(t, seen[p], "place %d printed twice", p)
		seen[p] = true
	}

	file := filepath.Join(t.TempDir(), "places.txt")
	require.NoError(t, os.WriteFile(file, []byte("# number place\n\n"+out), 0o644))
	code, out2, errOut := run(t, "", "--seed", seedHex, "--commitment", commitment, "--n", strconv.Itoa(n), "--places", file)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out2, "all 100000 places match")

	code, out2, errOut = run(t, out, "--seed", seedHex, "--commitment", commitment, "--n", strconv.Itoa(n), "--places", "-")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out2, "all 100000 places match")

	// Swap the places of numbers 500 and 70000, and claim a place for number 100001.
	bad := append([]string(nil), lines...)
	p500, p70k := d.Place(500), d.Place(70_000)
	bad[499] = fmt.Sprintf("500 %d", p70k)
	bad[69_999] = fmt.Sprintf("70000  %d", p500)
	bad = append(bad, "100001 1")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join(bad, "\n")+"\n"), 0o644))
	code, out2, errOut = run(t, "", "--seed", seedHex, "--commitment", commitment, "--n", strconv.Itoa(n), "--places", file)
	require.Equal(t, 1, code, errOut)
	sc := bufio.NewScanner(strings.NewReader(out2))
	var got []string
	for sc.Scan() {
		got = append(got, sc.Text())
	}
	require.Equal(t, []string{
		fmt.Sprintf("line 500: number 500 has place %d, not %d", p500, p70k),
		fmt.Sprintf("line 70000: number 70000 has place %d, not %d", p70k, p500),
		"line 100001: number 100001 is not in 1..100000",
		"MISMATCH: 3 of 100001 lines do not match the draw (first 3 shown)",
	}, got)
}

// TestCommandShowsFirstMismatches: with many mismatches only the first ten are listed.
func TestCommandShowsFirstMismatches(t *testing.T) {
	seed := seqSeed()
	d, err := New(seed, 50)
	require.NoError(t, err)
	var in strings.Builder
	for x := int64(1); x <= 50; x++ {
		fmt.Fprintf(&in, "%d %d\n", x, d.Place(x)%50+1) // every place shifted by one
	}
	code, out, _ := run(t, in.String(), "--seed", hex.EncodeToString(seed), "--commitment", Commitment(seed), "--n", "50", "--places", "-")
	require.Equal(t, 1, code)
	require.Equal(t, 11, strings.Count(out, "\n"), out)
	require.True(t, strings.HasPrefix(out, fmt.Sprintf("line 1: number 1 has place %d, not %d\n", d.Place(1), d.Place(1)%50+1)), out)
	require.Contains(t, out, "MISMATCH: 50 of 50 lines do not match the draw (first 10 shown)")
}

func TestCommandCommitmentMismatch(t *testing.T) {
	seed := seqSeed()
	code, out, errOut := run(t, "", "--seed", hex.EncodeToString(seed), "--commitment", Commitment(testSeed("other")), "--n", "10")
	require.Equal(t, 1, code)
	require.Empty(t, out, "no places are printed for a seed that does not match")
	require.Contains(t, errOut, "does not match the commitment")
}

// TestCommandNobodyDrawn: an event without a pre-queue publishes its draw with n 0; the command
// checks its commitment and prints no place (it answered "--n is required" before).
func TestCommandNobodyDrawn(t *testing.T) {
	seed := seqSeed()
	code, out, errOut := run(t, "", "--seed", hex.EncodeToString(seed), "--commitment", Commitment(seed), "--n", "0")
	require.Equal(t, 0, code, errOut)
	require.Empty(t, out)
	code, _, errOut = run(t, "", "--seed", hex.EncodeToString(seed), "--commitment", Commitment(testSeed("other")), "--n", "0")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "does not match the commitment")
}

func TestCommandUsageErrors(t *testing.T) {
	seed := seqSeed()
	seedHex, c := hex.EncodeToString(seed), Commitment(seed)
	dir := t.TempDir()
	garbled := filepath.Join(dir, "garbled.txt")
	require.NoError(t, os.WriteFile(garbled, []byte("1 7\n2 nine\n"), 0o644))
	threeFields := filepath.Join(dir, "three.txt")
	require.NoError(t, os.WriteFile(threeFields, []byte("1 7 8\n"), 0o644))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no flags", nil, "required"},
		{"no seed", []string{"--commitment", c, "--n", "10"}, "required"},
		{"no commitment", []string{"--seed", seedHex, "--n", "10"}, "required"},
		{"no n", []string{"--seed", seedHex, "--commitment", c}, "required"},
		{"unknown flag", []string{"--seed", seedHex, "--commitment", c, "--n", "10", "--nope"}, "flag provided but not defined"},
		{"bad n", []string{"--seed", seedHex, "--commitment", c, "--n", "ten"}, "invalid value"},
		{"negative n", []string{"--seed", seedHex, "--commitment", c, "--n", "-3"}, "n must be"},
		{"short seed", []string{"--seed", seedHex[:10], "--commitment", c, "--n", "10"}, "seed must be 32 bytes"},
		{"arguments", []string{"--seed", seedHex, "--commitment", c, "--n", "10", "extra"}, "unexpected arguments"},
		{"missing file", []string{"--seed", seedHex, "--commitment", c, "--n", "10", "--places", filepath.Join(dir, "nope")}, "no such file"},
		{"garbled line", []string{"--seed", seedHex, "--commitment", c, "--n", "10", "--places", garbled}, "line 2: want two integers"},
		{"three fields", []string{"--seed", seedHex, "--commitment", c, "--n", "10", "--places", threeFields}, `line 1: want "number place"`},
		{"partial without places", []string{"--seed", seedHex, "--commitment", c, "--n", "10", "--partial"}, "--partial goes with --places"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := run(t, "", tc.args...)
			require.Equal(t, 2, code, errOut)
			require.Contains(t, errOut, tc.want)
		})
	}
	code, out, _ := run(t, "", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "Usage: waitroom verify-draw")
}

// TestCommandRefusesPartialAndDuplicatedFiles (issue 20): "ok" means the whole draw was checked.
// A file that leaves numbers out is refused unless --partial asks for a check of those listed
// (the answer says how many were not); a number listed twice is refused either way, even when
// both of its lines give its drawn place.
func TestCommandRefusesPartialAndDuplicatedFiles(t *testing.T) {
	seed := testSeed("partial")
	seedHex, c := hex.EncodeToString(seed), Commitment(seed)
	d, err := New(seed, 10)
	require.NoError(t, err)
	line := func(x int64) string { return fmt.Sprintf("%d %d\n", x, d.Place(x)) }
	var full, three, dup strings.Builder
	for x := int64(1); x <= 10; x++ {
		full.WriteString(line(x))
		dup.WriteString(line(x))
	}
	dup.WriteString(line(4))
	for _, x := range []int64{2, 5, 9} {
		three.WriteString(line(x))
	}
	args := []string{"--seed", seedHex, "--commitment", c, "--n", "10", "--places", "-"}

	code, out, errOut := run(t, full.String(), args...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "all 10 places match")

	code, out, errOut = run(t, three.String(), args...)
	require.Equal(t, 2, code, out)
	require.Empty(t, out, "no ok for a partial file")
	require.Contains(t, errOut, "lists 3 of the 10 numbers drawn; 7 are missing (1, 3, 4, 6, 7, 8, 10)")
	require.Contains(t, errOut, "--partial")

	code, out, errOut = run(t, three.String(), append(args, "--partial")...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "the 3 places listed match the draw of 10 tickets (a partial check: 7 numbers not listed)")

	for _, extra := range [][]string{nil, {"--partial"}} {
		code, out, errOut = run(t, dup.String(), append(args, extra...)...)
		require.Equal(t, 2, code, out)
		require.Empty(t, out)
		require.Contains(t, errOut, "line 11: number 4 is listed twice")
	}

	// A number listed twice with a wrong place the second time is refused as a duplicate too.
	wrong := full.String() + fmt.Sprintf("4 %d\n", d.Place(5))
	code, _, errOut = run(t, wrong, args...)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "line 11: number 4 is listed twice")

	// Missing numbers of a large draw are named by the first few.
	big, err := New(seed, 100_000)
	require.NoError(t, err)
	var most strings.Builder
	for x := int64(1); x <= 100_000; x++ {
		if x%1000 != 0 {
			fmt.Fprintf(&most, "%d %d\n", x, big.Place(x))
		}
	}
	code, _, errOut = run(t, most.String(), "--seed", seedHex, "--commitment", c, "--n", "100000", "--places", "-")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "lists 99900 of the 100000 numbers drawn; 100 are missing (1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000, …)")
}
