package testutil

import (
	"flag"
	"strconv"
)

// ParallelWaits sets -test.parallel to n unless the command line gave
// it, for a TestMain (before m.Run) of a package whose parallel tests
// spend their time waiting out timeouts and peers rather than on a CPU.
// The default, GOMAXPROCS, runs two of them at a time on a 2-core CI
// runner, which turns a dozen one-second waits into six seconds.
// go test -parallel still decides when given.
func ParallelWaits(n int) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}
