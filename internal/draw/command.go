package draw

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

const commandUsage = `Usage: waitroom verify-draw --seed HEX --commitment HEX --n N [--places FILE|-]

Checks a revealed draw seed against the commitment published before the opening, then either
prints the place drawn for every ticket number, one "number place" line each, or checks the
"number place" lines of FILE (- for standard input; blank lines and lines starting with # are
skipped). The algorithm is in docs/draw.md.

Exit status: 0 all is well; 1 the seed does not match the commitment, or a listed place is not
the one drawn (the first mismatches are printed); 2 a usage error or an unreadable line.

Flags:
`

// maxMismatchesShown is how many mismatching lines the command prints.
const maxMismatchesShown = 10

// Command runs `waitroom verify-draw` with args (the flags after "verify-draw") and returns
// the process exit status: 0 verified, 1 mismatch (commitment or places), 2 usage error.
// stdin is read for --places -.
func Command(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("verify-draw", flag.ContinueOnError)
	var usage bytes.Buffer
	fs.SetOutput(&usage)
	fs.Usage = func() { fmt.Fprint(fs.Output(), commandUsage); fs.PrintDefaults() }
	seedHex := fs.String("seed", "", "the revealed seed, 64 hex characters (required)")
	commitment := fs.String("commitment", "", "the commitment published before the opening, 64 hex characters (required)")
	n := fs.Int64("n", 0, "the number of tickets drawn, N (required)")
	places := fs.String("places", "", `check the "number place" lines of this file (- for standard input) instead of printing every place`)

	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "waitroom verify-draw: "+format+"\n", a...)
		return 2
	}
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		_, _ = stdout.Write(usage.Bytes())
		return 0
	case err != nil:
		_, _ = stderr.Write(usage.Bytes())
		return 2
	case fs.NArg() > 0:
		return fail("unexpected arguments %q (flags only; see --help)", fs.Args())
	case *seedHex == "" || *commitment == "" || *n == 0:
		return fail("--seed, --commitment and --n are required (see --help)")
	}
	seed, err := ParseSeed(strings.TrimSpace(*seedHex))
	if err != nil {
		return fail("--seed: %v", err)
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
			res.mismatches, res.lines, len(res.shown))
		return 1
	}
	fmt.Fprintf(stdout, "ok: the seed matches the commitment and all %d places match the draw of %d tickets\n", res.lines, d.N())
	return 0
}

// checkResult is the outcome of check.
type checkResult struct {
	lines      int64    // "number place" lines read
	mismatches int64    // lines whose place is not the drawn one
	shown      []string // the first maxMismatchesShown mismatches, described
}

// check compares each "number place" line of r with d. A line that does not parse is an error
// (with its line number); a number outside [1, N] is a mismatch.
func check(d *Draw, r io.Reader) (checkResult, error) {
	var res checkResult
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
		res.lines++
		got := d.Place(number)
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
