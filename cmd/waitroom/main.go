// Command waitroom runs the Waitroom service (serve), its flash-crowd load generator (crowd)
// and its maintenance commands. See `waitroom --help`.
package main

import (
	"os"

	"github.com/waitroom/waitroom/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
