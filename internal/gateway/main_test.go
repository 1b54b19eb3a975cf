package gateway_test

import (
	"os"
	"testing"

	"github.com/waitroom/waitroom/internal/cli"
)

// envRunMain makes the test binary run the waitroom command instead of the tests: the nginx
// test starts a real `waitroom serve --gate` this way, without building the binary.
const envRunMain = "WAITROOM_GATEWAY_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
