package deploy_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// tempDirs are removed after every test ran (they hold what tests share, like the binary).
var tempDirs []string

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range tempDirs {
		_ = os.RemoveAll(d)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
