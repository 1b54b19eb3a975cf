package crowd

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

const (
	ttyInterval   = 200 * time.Millisecond // live bar: about five updates a second
	plainInterval = 5 * time.Second        // log-friendly: one line every five seconds
)

// startProgress reports the run's counters on w until the returned function is called; that
// function prints a last update and returns once the reporter has stopped. On a terminal the
// report is a live bar redrawn in place, elsewhere (files, pipes, CI logs) one line per interval.
func startProgress(w io.Writer, r *runner) (stop func()) {
	if w == io.Discard {
		return func() {}
	}
	tty, width := false, 0
	if f, ok := w.(interface{ Fd() uintptr }); ok && term.IsTerminal(int(f.Fd())) {
		tty = true
		if wd, _, err := term.GetSize(int(f.Fd())); err == nil {
			width = wd
		}
	}
	interval := plainInterval
	if tty {
		interval = ttyInterval
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				writeProgress(w, r, tty, width, false)
			case <-quit:
				writeProgress(w, r, tty, width, true)
				return
			}
		}
	})
	return func() {
		close(quit)
		wg.Wait()
	}
}

func writeProgress(w io.Writer, r *runner, tty bool, width int, final bool) {
	users := int64(r.cfg.Users)
	done := r.done.Load()
	elapsed := time.Since(r.start)
	if final {
		elapsed = r.end.Sub(r.start)
	}
	text := fmt.Sprintf("%6.1fs  joined %d/%d  admitted %d  done %d  errors %d",
		elapsed.Seconds(), r.joined.Load(), users, r.admitted.Load(), done, r.errorsTotal.Load())
	if !tty {
		fmt.Fprintf(w, "crowd: %s\n", text)
		return
	}
	line := text
	if barWidth := min(width-len(text)-10, 40); barWidth >= 10 {
		filled := int(int64(barWidth) * done / max(users, 1))
		line = fmt.Sprintf("[%s%s] %3d%%  %s", strings.Repeat("=", filled), strings.Repeat(" ", barWidth-filled),
			done*100/max(users, 1), text)
	}
	end := ""
	if final {
		end = "\n"
	}
	fmt.Fprintf(w, "\r%s\x1b[K%s", line, end)
}
