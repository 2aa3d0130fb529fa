//go:build linux

package main

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestInterruptedBuildLeavesNothing interrupts the gatehouse build (a run
// interrupted while it builds) and wants nothing of it left: not go's
// work directory, which a go command that is killed cannot remove, nor a
// compiler still writing once the run's temp dir is gone.
func TestInterruptedBuildLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ./cmd/gatehouse")
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	goTmp := t.TempDir()
	t.Setenv("GOTMPDIR", goTmp) // where go puts its work dir unless told otherwise
	t.Setenv("GOFLAGS", "-a")   // a build that is still compiling when interrupted
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if _, err := buildGatehouse(ctx, root, dir); err == nil {
		t.Fatal("the build outlived its interrupt")
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // a compiler left running would write again
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("%s came back after the run removed it: the build's processes outlived it", dir)
	}
	if left, _ := os.ReadDir(goTmp); len(left) > 0 {
		t.Errorf("the interrupted build left %s in GOTMPDIR", left[0].Name())
	}
}
