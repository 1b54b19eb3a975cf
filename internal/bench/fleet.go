package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/waitroom/waitroom/internal/push"
)

// The fleet target (ws/fleet, issue 22): several `waitroom serve` instances on the run's Redis
// hold FleetSockets WebSockets between them, opened by several client processes (this binary,
// `bench --ws-hold`), each instance and each client process under the open-file limit. When
// every socket has its first message and the line has stood still for wsSettle, the admitted
// ticket 1 leaves: the processor admits ticket 2 and every socket's place drops by one. The
// line counts the sockets held at the end, those that received the update and how long after
// the leave the last did, and the users lost (sockets that closed or never heard). Along the
// way it measures what a socket costs an instance: RSS, CPU per second while the line stands
// still (keep-alive pings, the hub's ticks) and CPU per update delivered.

// Fleet sizes.
const (
	fleetTarget    = 100_000          // sockets the target asks for
	fleetWithin    = 2 * time.Second  // an update reaches every socket within this
	fleetQuiet     = 10 * time.Second // the window over which idle CPU is measured
	fleetHoldLimit = 15 * time.Second // how long the clients wait for the update
	fleetMinProcs  = 2                // at least this many instances and client processes
)

// fleetShares splits n sockets over processes that may each hold perProc: at least
// fleetMinProcs of them, evenly.
func fleetShares(n, perProc int) []int {
	k := max(fleetMinProcs, (n+perProc-1)/perProc)
	out := make([]int, k)
	for i := range out {
		out[i] = n / k
		if i < n%k {
			out[i]++
		}
	}
	return out
}

// fleetClient is one client process of the fleet.
type fleetClient struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	done   chan struct{}
	stderr *os.File
}

// fleetTargets measures ws/fleet.
func (e *env) fleetTargets(ctx context.Context, rep *Report) {
	const ev = "fleet"
	n := e.cfg.FleetSockets
	limit := noFileLimit()
	perInstance := push.DefaultMaxConnsFor(uint64(limit)) // the instance's own push cap
	perClient := limit - 512                              // this process's files less its pools and streams
	if perClient < 1 {
		rep.fail("ws/fleet", fmt.Errorf("an open-file limit of %d leaves no room for sockets", limit))
		return
	}
	instShare, clientShare := fleetShares(n, perInstance), fleetShares(n, perClient)
	e.progress("ws/fleet: %s sockets over %d instances (at most %s each, their push cap) and %d client processes",
		thousands(float64(n)), len(instShare), thousands(float64(perInstance)), len(clientShare))

	var ins []*instance
	defer func() {
		for _, in := range ins {
			in.stop()
		}
	}()
	for range instShare {
		in, err := e.startInstance(ctx)
		if err != nil {
			rep.fail("ws/fleet", err)
			return
		}
		ins = append(ins, in)
	}
	// Ticket 1 is admitted (it leaves later); the others wait. Each instance's sockets are
	// taken through that instance.
	if err := ins[0].putEvent(ctx, ev, 1); err != nil {
		rep.fail("ws/fleet", err)
		return
	}
	c := newLoadClient(httpConns)
	defer c.CloseIdleConnections()
	first, _, err := ins[0].join(ctx, c, ev)
	if err != nil {
		rep.fail("ws/fleet", err)
		return
	}
	urls := make([]string, 0, n)
	for i, in := range ins {
		e.progress("ws/fleet: taking %s tickets through instance %d", thousands(float64(instShare[i])), i+1)
		ids, err := e.takeTickets(ctx, in, c, ev, instShare[i])
		if err != nil {
			rep.fail("ws/fleet", err)
			return
		}
		base := "ws" + strings.TrimPrefix(in.base, "http") + "/v1/events/" + ev + "/tickets/"
		for _, id := range ids {
			urls = append(urls, base+id+"/ws")
		}
	}
	// The instances' own CPU at rest without sockets (the admission processor, the registry's
	// sync, the history), to take out of the sockets' share.
	base0, err := fleetCPU(ins)
	if err != nil {
		rep.fail("ws/fleet", err)
		return
	}
	time.Sleep(fleetQuiet)
	base1, err := fleetCPU(ins)
	if err != nil {
		rep.fail("ws/fleet", err)
		return
	}
	basePerS := float64(base1-base0) / fleetQuiet.Seconds() // ns of CPU per second
	// The client processes take every k-th URL, so each holds sockets on every instance.
	rss0 := make([]int64, len(ins))
	for i, in := range ins {
		if rss0[i], err = in.rss(); err != nil {
			rep.fail("ws/fleet", err)
			return
		}
	}
	exe, err := e.exe()
	if err != nil {
		rep.fail("ws/fleet", err)
		return
	}
	var clients []*fleetClient
	defer func() {
		for _, fc := range clients {
			fc.stop()
		}
	}()
	e.progress("ws/fleet: opening the sockets")
	for p := range clientShare {
		var mine []string
		for i := p; i < len(urls); i += len(clientShare) {
			mine = append(mine, urls[i])
		}
		fc, err := startFleetClient(exe, mine)
		if err != nil {
			rep.fail("ws/fleet", err)
			return
		}
		clients = append(clients, fc)
	}
	opened, failed := 0, 0
	for _, fc := range clients {
		f, err := fc.expect(ctx, "ready", 5*time.Minute)
		if err != nil {
			rep.fail("ws/fleet", err)
			return
		}
		opened, failed = opened+atoi(f[1]), failed+atoi(f[2])
	}
	e.progress("ws/fleet: %s sockets open (%d failed to open); settling for %s", thousands(float64(opened)), failed, wsSettle)
	time.Sleep(wsSettle)

	// The line stands still: what the sockets cost the instances (and the clients) at rest.
	cpu0, err := fleetCPU(ins)
	ccpu0 := clientsCPU(clients)
	if err != nil {
		rep.fail("ws/fleet", err)
		return
	}
	time.Sleep(fleetQuiet)
	cpu1, err := fleetCPU(ins)
	ccpu1 := clientsCPU(clients)
	quietEnd := time.Now()
	if err != nil {
		rep.fail("ws/fleet", err)
		return
	}
	var rssPer []float64
	for i, in := range ins {
		r, err := in.rss()
		if err != nil {
			rep.fail("ws/fleet", err)
			return
		}
		rssPer = append(rssPer, float64(r-rss0[i])/float64(instShare[i]))
	}

	e.progress("ws/fleet: ticket 1 leaves; waiting for every socket's update")
	trigger := time.Now()
	for _, fc := range clients {
		if _, err := fmt.Fprintf(fc.in, "trigger %d\n", trigger.UnixNano()); err != nil {
			rep.fail("ws/fleet", err)
			return
		}
	}
	for _, fc := range clients {
		if _, err := fc.expect(ctx, "armed", time.Minute); err != nil {
			rep.fail("ws/fleet", err)
			return
		}
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, ins[0].base+"/v1/events/"+ev+"/tickets/"+first.TicketID, nil)
	resp, err := c.Do(req)
	if err == nil {
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			err = fmt.Errorf("leave: %d", resp.StatusCode)
		}
	}
	if err != nil {
		rep.fail("ws/fleet", err)
		return
	}
	var got, held int
	var worst time.Duration
	earliest := time.Duration(math.MaxInt64)
	var p50s []float64
	for _, fc := range clients {
		f, err := fc.expect(ctx, "result", fleetHoldLimit+time.Minute)
		if err != nil {
			rep.fail("ws/fleet", err)
			return
		}
		held, got = held+atoi(f[1]), got+atoi(f[2])
		worst = max(worst, time.Duration(atoi(f[4])))
		if len(f) > 5 {
			earliest = min(earliest, time.Duration(atoi(f[5])))
		}
		p50s = append(p50s, float64(atoi(f[3])))
	}
	cpu2, err := fleetCPU(ins)
	ccpu2 := clientsCPU(clients)
	if err != nil {
		rep.fail("ws/fleet", err)
		return
	}
	updateWindow := time.Since(quietEnd)
	lost := n - got
	idleUS := max(float64(cpu1-cpu0)-basePerS*fleetQuiet.Seconds(), 0) / float64(time.Microsecond) / float64(opened) / fleetQuiet.Seconds()
	restPerS := float64(cpu1-cpu0) / fleetQuiet.Seconds() // the instances at rest with their sockets
	updateUS := max(float64(cpu2-cpu1)-restPerS*updateWindow.Seconds(), 0) / float64(time.Microsecond) / float64(max(got, 1))
	clientUS := max(float64(ccpu2-ccpu1)-float64(ccpu1-ccpu0)/fleetQuiet.Seconds()*updateWindow.Seconds(), 0) / float64(time.Microsecond) / float64(max(got, 1))
	rssKiB := median(rssPer) / 1024
	slices.Sort(p50s)
	countOK, timeOK, lostOK := held >= fleetTarget, got == n && worst <= fleetWithin, lost == 0
	rep.add("ws/fleet", holds(countOK && timeOK && lostOK),
		"%d waitroom serve instances on Redis (push cap %s each) and %d client processes (under %d open files each): %s of %s WebSockets held [%s: %s]; an update reached %s of them, the first %s and the last %s after the line moved (p50 of the processes' medians %s) [all within 2 s: %s]; %s users lost [0: %s]",
		len(ins), thousands(float64(perInstance)), len(clients), limit, thousands(float64(held)), thousands(float64(n)),
		thousands(fleetTarget), part(countOK), thousands(float64(got)), earliest.Round(time.Millisecond), worst.Round(time.Millisecond),
		time.Duration(median(p50s)).Round(time.Millisecond), part(timeOK), thousands(float64(lost)), part(lostOK))
	rep.info("fleet: instance RSS per WebSocket", "%.1f KiB (median of the instances)", rssKiB)
	rep.info("fleet: instance CPU per WebSocket at rest", "%.2f µs/s (keep-alive pings, the hub's ticks; %s over %s, less the instances' own %s without sockets)",
		idleUS, (cpu1 - cpu0).Round(time.Millisecond), fleetQuiet, time.Duration(basePerS*fleetQuiet.Seconds()).Round(time.Millisecond))
	rep.info("fleet: instance CPU per update delivered", "%.1f µs (the leave, the admission step, the tick, framing and writing: %s over %s, less the same time at rest)",
		updateUS, (cpu2 - cpu1).Round(time.Millisecond), updateWindow.Round(time.Millisecond))
	rep.info("fleet: client CPU per update received", "%.1f µs (the client processes, on the same cores: reading, a frame, JSON; %s over %s, less the same time at rest)",
		clientUS, (ccpu2 - ccpu1).Round(time.Millisecond), updateWindow.Round(time.Millisecond))
	if n < fleetTarget {
		e.note("ws/fleet ran with %s sockets (--fleet-sockets); its target is %s", thousands(float64(n)), thousands(fleetTarget))
	}
}

// takeTickets takes n waiting tickets of event ev through in.
func (e *env) takeTickets(ctx context.Context, in *instance, c *http.Client, ev string, n int) ([]string, error) {
	ids := make([]string, n)
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	jctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for range httpConns {
		wg.Go(func() {
			for jctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				t, _, err := in.join(jctx, c, ev)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					cancel()
					return
				}
				ids[i] = t.TicketID
			}
		})
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok && err != nil {
		return nil, err
	}
	if jctx.Err() != nil {
		return nil, errors.New("taking the tickets took more than 5 minutes")
	}
	return ids, nil
}

// fleetCPU is the CPU time the instances have used in all.
func fleetCPU(ins []*instance) (time.Duration, error) {
	var sum time.Duration
	for _, in := range ins {
		c, err := in.cpu()
		if err != nil {
			return 0, err
		}
		sum += c
	}
	return sum, nil
}

// clientsCPU is the CPU time the fleet's client processes have used in all (0 for one whose
// /proc entry cannot be read).
func clientsCPU(cs []*fleetClient) time.Duration {
	var sum time.Duration
	for _, fc := range cs {
		c, _ := (&process{cmd: fc.cmd}).cpu()
		sum += c
	}
	return sum
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// startFleetClient starts `exe bench --ws-hold` with urls on its stdin.
func startFleetClient(exe string, urls []string) (*fleetClient, error) {
	errf, err := os.CreateTemp("", "waitroom-bench-fleet-client-*.log")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "bench", "--ws-hold")
	cmd.Stderr = errf
	in, err := cmd.StdinPipe()
	if err != nil {
		errf.Close()
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		errf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		errf.Close()
		return nil, err
	}
	fc := &fleetClient{cmd: cmd, in: in, out: bufio.NewScanner(out), done: make(chan struct{}), stderr: errf}
	go func() { _ = cmd.Wait(); close(fc.done) }()
	go func() {
		w := bufio.NewWriter(in)
		for _, u := range urls {
			_, _ = w.WriteString(u + "\n")
		}
		_, _ = w.WriteString("go\n")
		_ = w.Flush()
	}()
	return fc, nil
}

// expect reads the client's next line, which must start with word, within d.
func (fc *fleetClient) expect(ctx context.Context, word string, d time.Duration) ([]string, error) {
	line := make(chan []string, 1)
	go func() {
		if fc.out.Scan() {
			line <- strings.Fields(fc.out.Text())
		} else {
			line <- nil
		}
	}()
	select {
	case f := <-line:
		if len(f) == 0 || f[0] != word {
			return nil, fmt.Errorf("fleet client: want %q, got %q (%s)", word, f, fc.tail())
		}
		return f, nil
	case <-time.After(d):
		return nil, fmt.Errorf("fleet client: no %q within %s", word, d)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (fc *fleetClient) tail() string {
	b, _ := os.ReadFile(fc.stderr.Name())
	if len(b) > 500 {
		b = b[len(b)-500:]
	}
	return strings.TrimSpace(string(b))
}

// stop ends the client (stdin closed: it closes its sockets and exits), killing it after 10 s.
func (fc *fleetClient) stop() {
	_ = fc.in.Close()
	select {
	case <-fc.done:
	case <-time.After(10 * time.Second):
		_ = fc.cmd.Process.Kill()
		<-fc.done
	}
	fc.stderr.Close()
	_ = os.Remove(fc.stderr.Name())
}

// HoldWebSockets is a fleet client process (`bench --ws-hold`): it reads WebSocket URLs from
// in, one a line, up to a line "go"; opens them (128 handshakes at a time), reads each one's
// first message (a position) and writes "ready <opened> <failed>" to out. On a line
// "trigger <unix ns>" it answers "armed" and notes, for each socket, the first message after it that moves its
// place (a lower position, or admitted), and once every socket has one, or after
// limit, writes "result <held> <got> <p50 ns> <max ns> <min ns>" (times from the trigger;
// held: sockets still open). It closes everything and returns when in ends.
func HoldWebSockets(ctx context.Context, in io.Reader, out io.Writer, limit time.Duration) error {
	noFileLimit()
	sc := bufio.NewScanner(in)
	var urls []string
	for sc.Scan() && sc.Text() != "go" {
		urls = append(urls, sc.Text())
	}
	type hold struct {
		first   int64
		updated atomic.Int64 // unix ns of the first update after the trigger
		closed  atomic.Bool
	}
	var trigger atomic.Int64
	holds := make([]*hold, len(urls))
	conns := make([]io.Closer, len(urls))
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	octx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for range 128 {
		wg.Go(func() {
			for octx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(urls) {
					return
				}
				nc, br, _, err := ws.Dial(octx, urls[i])
				if err != nil {
					failed.Add(1)
					continue
				}
				// Buffered, so that a message is one read of the socket. The handshake's
				// reader, when it holds the first message, reads on from the socket itself.
				if br == nil {
					br = bufio.NewReaderSize(nc, 512)
				}
				rw := struct {
					io.Reader
					io.Writer
				}{br, nc}
				b, err := wsutil.ReadServerText(rw)
				var m pushMessage
				if err != nil || json.Unmarshal(b, &m) != nil || m.Type != "position" {
					failed.Add(1)
					_ = nc.Close()
					continue
				}
				h := &hold{first: m.Position}
				holds[i], conns[i] = h, nc
				go func() {
					defer h.closed.Store(true)
					_ = readFleetSocket(br, nc, func(msg []byte) {
						if trigger.Load() != 0 && h.updated.Load() == 0 && movedPlace(msg, h.first) {
							h.updated.Store(time.Now().UnixNano())
						}
					})
				}()
			}
		})
	}
	wg.Wait()
	defer func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	fmt.Fprintf(out, "ready %d %d\n", len(urls)-int(failed.Load()), failed.Load())
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || f[0] != "trigger" {
			continue
		}
		t, _ := strconv.ParseInt(f[1], 10, 64)
		trigger.Store(t)
		// The coordinator moves the line only after this: a reader ignores what comes before
		// it knows the trigger, and an update that overtook this line went unheard.
		fmt.Fprintln(out, "armed")
		deadline := time.Now().Add(limit)
		for {
			all := true
			for _, h := range holds {
				if h != nil && h.updated.Load() == 0 && !h.closed.Load() {
					all = false
					break
				}
			}
			if all || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		var held, got int
		var delays []float64
		for _, h := range holds {
			if h == nil {
				continue
			}
			if !h.closed.Load() {
				held++
			}
			if u := h.updated.Load(); u != 0 {
				got++
				delays = append(delays, float64(u-t))
			}
		}
		slices.Sort(delays)
		var p50, worst, first float64
		if len(delays) > 0 {
			p50, worst, first = median(delays), delays[len(delays)-1], delays[0]
		}
		fmt.Fprintf(out, "result %d %d %d %d %d\n", held, got, int64(p50), int64(worst), int64(first))
	}
	return nil
}

// readFleetSocket reads a client's WebSocket from r until it fails or closes, passing each text
// message to text (the slice is reused: text must not keep it) and answering pings on w. It is
// the fleet clients' reader, leaner than wsutil's (no reader, handler or buffer allocated per
// message), since 6 of them share the machine's 2 cores with the instances they measure.
func readFleetSocket(r *bufio.Reader, w io.Writer, text func([]byte)) error {
	hb := make([]byte, ws.MaxHeaderSize-2)
	var msg []byte // a text message, across its fragments
	buf := make([]byte, 0, 256)
	for {
		hd, err := ws.ReadHeaderBuffer(r, hb)
		if err != nil {
			return err
		}
		if hd.Length > 1<<20 {
			return fmt.Errorf("a frame of %d bytes", hd.Length)
		}
		if int64(cap(buf)) < hd.Length {
			buf = make([]byte, hd.Length)
		}
		p := buf[:hd.Length]
		if _, err := io.ReadFull(r, p); err != nil {
			return err
		}
		if hd.Masked {
			ws.Cipher(p, hd.Mask, 0)
		}
		switch hd.OpCode {
		case ws.OpPing:
			if err := ws.WriteFrame(w, ws.MaskFrameInPlace(ws.NewPongFrame(p))); err != nil {
				return err
			}
		case ws.OpClose:
			return io.EOF
		case ws.OpText, ws.OpContinuation:
			if hd.OpCode == ws.OpText {
				msg = msg[:0]
			}
			if hd.Fin && len(msg) == 0 {
				text(p)
				continue
			}
			msg = append(msg, p...)
			if hd.Fin {
				text(msg)
				msg = msg[:0]
			}
		}
	}
}

// movedPlace reports whether msg, a push message, moves a socket whose first place was first:
// a lower position, or admitted. The server writes "type" first (push.head); the common
// messages are read without encoding/json, anything else with it.
func movedPlace(msg []byte, first int64) bool {
	const typ, pos = `{"type":"`, `,"position":`
	if rest, ok := bytes.CutPrefix(msg, []byte(typ)); ok {
		switch {
		case bytes.HasPrefix(rest, []byte(push.TypeAdmitted+`"`)):
			return true
		case bytes.HasPrefix(rest, []byte(push.TypePosition+`"`)):
			if i := bytes.Index(rest, []byte(pos)); i >= 0 {
				d := rest[i+len(pos):]
				n, k := int64(0), 0
				for ; k < len(d) && d[k] >= '0' && d[k] <= '9'; k++ {
					n = n*10 + int64(d[k]-'0')
				}
				if k > 0 && k < len(d) && (d[k] == ',' || d[k] == '}') {
					return n < first
				}
			}
		default:
			if !bytes.HasPrefix(rest, []byte(push.TypeAdmitted)) && !bytes.HasPrefix(rest, []byte(push.TypePosition)) {
				return false // another type: not an update
			}
		}
	}
	var m pushMessage
	if json.Unmarshal(msg, &m) != nil {
		return false
	}
	return (m.Type == push.TypePosition && m.Position < first) || m.Type == push.TypeAdmitted
}
