// Package servetest runs `waitroom serve` as a process in tests: the test binary itself (see
// the TestMain of internal/cli and internal/gateway) or a built binary.
package servetest

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// stopWithin is how long a process gets after SIGINT before it is killed (and the test fails).
const stopWithin = 20 * time.Second

var servingLine = regexp.MustCompile(`waitroom serving" addr=(\S+)`)

// Start starts cmd, a `waitroom serve --addr 127.0.0.1:0 …` logging as text on stderr, and
// returns the API's base URL ("http://127.0.0.1:port") once its "waitroom serving" line names
// the address. It fails the test when the process exits first or does not serve within
// timeout. Lines logged at WARN or ERROR go to t.Logf. At cleanup the process gets SIGINT and
// stopWithin (20 s) to exit; then it is killed and the test fails.
func Start(t testing.TB, cmd *exec.Cmd, timeout time.Duration) string {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(stopWithin):
			_ = cmd.Process.Kill()
			t.Errorf("waitroom serve (pid %d) did not stop within %s of SIGINT", cmd.Process.Pid, stopWithin)
		}
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if m := servingLine.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
			if strings.Contains(line, "level=ERROR") || strings.Contains(line, "level=WARN") {
				t.Logf("serve: %s", line)
			}
		}
		exited <- cmd.Wait()
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case err := <-exited:
		exited <- err
		t.Fatalf("waitroom serve exited before serving: %v", err)
	case <-time.After(timeout):
		t.Fatalf("waitroom serve not serving within %s", timeout)
	}
	return ""
}
