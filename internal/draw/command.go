package draw

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/waitroom/waitroom/internal/cmdflag"
)

const commandUsage = `Usage: waitroom verify-draw --seed HEX --commitment HEX --n N [--places FILE|- [--partial]]

Checks a revealed draw seed against the commitment published before the opening, then either
prints the place drawn for every ticket number, one "number place" line each, or checks the
"number place" lines of FILE (- for standard input; blank lines and lines starting with # are
skipped). FILE must list every number 1..N once: a number listed twice, or (without
--partial) a number missing, is refused, so that "ok" always means the whole draw was checked.
With --partial only the numbers listed are checked (your own tickets, say), and the answer says
how many were not. The algorithm is in docs/draw.md.

Exit status: 0 all is well; 1 the seed does not match the commitment, or a listed place is not
the one drawn (the first mismatches are printed); 2 a usage error, an unreadable line, a number
listed twice, or a file that leaves numbers out without --partial.

Flags:
`

// maxMismatchesShown is how many mismatching lines the command prints.
const maxMismatchesShown = 10

// Command runs `waitroom verify-draw` with args (the flags after "verify-draw") and returns
// the process exit status: 0 verified, 1 mismatch (commitment or places), 2 usage error.
// stdin is read for --places -.
func Command(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := cmdflag.New("verify-draw", commandUsage)
	seedHex := fs.String("seed", "", "the revealed seed, 64 hex characters (required)")
	commitment := fs.String("commitment", "", "the commitment published before the opening, 64 hex characters (required)")
	n := fs.Int64("n", 0, "the number of tickets drawn, N (required)")
	places := fs.String("places", "", `check the "number place" lines of this file (- for standard input) instead of printing every place`)
	partial := fs.Bool("partial", false, "with --places: check only the numbers the file lists (else it must list all of 1..N)")

	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "waitroom verify-draw: "+format+"\n", a...)
		return 2
	}
	err := fs.Parse(args, stdout)
	nSet := false // --n 0 is a draw of nobody (an event without a pre-queue: /draw says n 0)
	fs.Visit(func(f *flag.Flag) { nSet = nSet || f.Name == "n" })
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil: // a mistake in the flags, or an argument
		return fail("%v", err)
	case *seedHex == "" || *commitment == "" || !nSet:
		return fail("--seed, --commitment and --n are required (see --help)")
	case *partial && *places == "":
		return fail("--partial goes with --places (see --help)")
	}
	seed, err := ParseSeed(strings.TrimSpace(*seedHex))
	if err != nil {
		return fail("--seed: %v", err)
	}
	if *n == 0 && *places == "" {
		// Nobody was drawn: only the commitment is checked, and there is no place to print.
		if err := Verify(strings.TrimSpace(*seedHex), strings.TrimSpace(*commitment)); err != nil {
			fmt.Fprintf(stderr, "waitroom verify-draw: %v\n", err)
			return 1
		}
		return 0
	}
	d, err := New(seed, *n)
	if err != nil {
		return fail("--n: %v", err)
	}
	if err := Verify(strings.TrimSpace(*seedHex), strings.TrimSpace(*commitment)); err != nil {
		fmt.Fprintf(stderr, "waitroom verify-draw: %v\n", err)
		return 1
	}

	if *places == "" {
		w := bufio.NewWriterSize(stdout, 64<<10)
		var line []byte
		for x := int64(1); x <= d.N(); x++ {
			line = strconv.AppendInt(line[:0], x, 10)
			line = append(line, ' ')
			line = strconv.AppendInt(line, d.Place(x), 10)
			line = append(line, '\n')
			if _, err := w.Write(line); err != nil {
				return fail("write: %v", err)
			}
		}
		if err := w.Flush(); err != nil {
			return fail("write: %v", err)
		}
		return 0
	}

	in := stdin
	if *places != "-" {
		f, err := os.Open(*places)
		if err != nil {
			return fail("--places: %v", err)
		}
		defer f.Close()
		in = f
	}
	res, err := check(d, in)
	if err != nil {
		return fail("--places %s: %v", *places, err)
	}
	for _, m := range res.shown {
		fmt.Fprintln(stdout, m)
	}
	if res.mismatches > 0 {
		fmt.Fprintf(stdout, "MISMATCH: %d of %d lines do not match the draw (first %d shown)\n",
			res.mismatches, res.lines+res.outside, len(res.shown))
		return 1
	}
	if missing := d.N() - res.lines; missing > 0 {
		if !*partial {
			return fail("--places %s lists %d of the %d numbers drawn; %d are missing (%s): list every number, or check only those listed with --partial",
				*places, res.lines, d.N(), missing, res.firstMissing(d.N()))
		}
		fmt.Fprintf(stdout, "ok: the seed matches the commitment and the %d places listed match the draw of %d tickets (a partial check: %d numbers not listed)\n",
			res.lines, d.N(), missing)
		return 0
	}
	fmt.Fprintf(stdout, "ok: the seed matches the commitment and all %d places match the draw of %d tickets\n", res.lines, d.N())
	return 0
}

// checkResult is the outcome of check.
type checkResult struct {
	lines      int64    // "number place" lines read of numbers in 1..N (each once)
	mismatches int64    // lines whose place is not the drawn one
	shown      []string // the first maxMismatchesShown mismatches, described
	outside    int64    // lines of numbers outside 1..N (mismatches)
	seen       numberSet
}

// numberSet is a set of numbers of 1..N: a bitmap in chunks of seenChunk numbers, made as
// numbers come, so that its memory follows the file's length rather than N (up to 2^62).
type numberSet map[int64]*[seenChunk / 64]uint64

const seenChunk = 1 << 16

// add adds x and reports whether it was there already.
func (s numberSet) add(x int64) bool {
	c := s[x/seenChunk]
	if c == nil {
		c = new([seenChunk / 64]uint64)
		s[x/seenChunk] = c
	}
	i, bit := (x%seenChunk)/64, uint64(1)<<(x%64)
	had := c[i]&bit != 0
	c[i] |= bit
	return had
}

func (s numberSet) has(x int64) bool {
	c := s[x/seenChunk]
	return c != nil && c[(x%seenChunk)/64]&(uint64(1)<<(x%64)) != 0
}

// firstMissing names the first numbers of 1..n not seen (at most maxMismatchesShown): "4, 5, …".
func (res checkResult) firstMissing(n int64) string {
	var out []string
	for x := int64(1); x <= n && len(out) < maxMismatchesShown; x++ {
		if !res.seen.has(x) {
			out = append(out, strconv.FormatInt(x, 10))
		}
	}
	if int64(len(out)) < n-res.lines {
		out = append(out, "…")
	}
	return strings.Join(out, ", ")
}

// check compares each "number place" line of r with d. A line that does not parse, or that
// lists a number listed before, is an error (with its line number); a number outside [1, N] is
// a mismatch. res.lines counts the lines of numbers in [1, N] once each.
func check(d *Draw, r io.Reader) (checkResult, error) {
	res := checkResult{seen: numberSet{}}
	sc := bufio.NewScanner(r)
	for lineNo := 1; sc.Scan(); lineNo++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' {
			continue
		}
		f := strings.Fields(text)
		if len(f) != 2 {
			return res, fmt.Errorf("line %d: want \"number place\", got %q", lineNo, text)
		}
		number, err1 := strconv.ParseInt(f[0], 10, 64)
		place, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			return res, fmt.Errorf("line %d: want two integers, got %q", lineNo, text)
		}
		got := d.Place(number)
		if got != 0 {
			if res.seen.add(number) {
				return res, fmt.Errorf("line %d: number %d is listed twice (each number once: the file is not one draw)", lineNo, number)
			}
			res.lines++
		} else {
			res.outside++
		}
		if got == place {
			continue
		}
		res.mismatches++
		if len(res.shown) < maxMismatchesShown {
			if got == 0 {
				res.shown = append(res.shown, fmt.Sprintf("line %d: number %d is not in 1..%d", lineNo, number, d.N()))
			} else {
				res.shown = append(res.shown, fmt.Sprintf("line %d: number %d has place %d, not %d", lineNo, number, got, place))
			}
		}
	}
	return res, sc.Err()
}
