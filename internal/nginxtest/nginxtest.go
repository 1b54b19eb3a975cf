// Package nginxtest runs Debian's nginx (/usr/sbin/nginx; scripts/services.sh ensure_nginx
// installs it) in tests, with one of the repository's nginx configurations rewritten only in
// its addresses, ports and paths.
package nginxtest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/waitroom/waitroom/internal/sqlstore/sqltest"
)

// Bin is Debian's nginx.
const Bin = "/usr/sbin/nginx"

// Require skips t when nginx is not installed, or fails it when CI asks for every service
// (sqltest.InCI).
func Require(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(Bin); err != nil {
		if sqltest.InCI() {
			t.Fatalf("%s: %v (scripts/services.sh ensure_nginx installs it)", Bin, err)
		}
		t.Skipf("%s not installed (scripts/services.sh ensure_nginx)", Bin)
	}
}

// FreeAddr returns a loopback address ("127.0.0.1:port") whose port was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Rewrite returns conf with each key of repl replaced by its value, once; a key conf does not
// hold fails t (the configuration changed under the test).
func Rewrite(t testing.TB, name, conf string, repl map[string]string) string {
	t.Helper()
	for old, with := range repl {
		if !strings.Contains(conf, old) {
			t.Fatalf("%s has no %q to replace", name, old)
		}
		conf = strings.Replace(conf, old, with, 1)
	}
	return conf
}

// Paths are the directives, of the main context and of http { }, that put everything nginx
// writes (pid, error log, temporary files) under dir, in the foreground: what a configuration
// written for /etc/nginx needs to run in a test.
func Paths(dir string) (main, http string) {
	main = "daemon off;\npid " + dir + "/nginx.pid;\nerror_log " + dir + "/error.log warn;\n"
	http = "\n    client_body_temp_path " + dir + "/body;\n    proxy_temp_path " + dir + "/proxy;\n" +
		"    fastcgi_temp_path " + dir + "/fastcgi;\n    uwsgi_temp_path " + dir + "/uwsgi;\n    scgi_temp_path " + dir + "/scgi;\n"
	return main, http
}

// Start checks (nginx -t) and runs nginx with the main configuration file conf, whose files
// are all under dir, and returns once it accepts connections on addr (within 10 s). At cleanup
// nginx gets SIGINT (a fast shutdown, its workers too); when t failed, its error log is
// logged. dir is opened to other users: as root, nginx's workers run as nobody.
func Start(t testing.TB, dir, conf, addr string) {
	t.Helper()
	for d := dir; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()) && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	main := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(main, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	errLog := filepath.Join(dir, "error.log")
	if out, err := exec.Command(Bin, "-t", "-p", dir, "-c", main, "-e", errLog).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	cmd := exec.Command(Bin, "-p", dir, "-c", main, "-e", errLog)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
		if t.Failed() {
			if b, _ := os.ReadFile(errLog); len(b) > 0 {
				t.Logf("nginx error.log:\n%s", b)
			}
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		select {
		case err := <-exited:
			t.Fatalf("nginx exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx not listening on %s within 10 s", addr)
		}
		time.Sleep(20 * time.Millisecond) // polling the port with a deadline
	}
}
