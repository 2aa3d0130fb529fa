//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// need is one Debian package the harness uses, and how to tell it is there.
type need struct {
	pkg     string
	present func() bool
}

func onPath(bin string) func() bool {
	return func() bool { _, err := exec.LookPath(bin); return err == nil }
}

func fileExists(path string) func() bool {
	return func() bool { _, err := os.Stat(path); return err == nil }
}

// nginxStreamModule is where Debian's libnginx-mod-stream puts the stream
// module (ssl_preread), which Debian builds as a dynamic module.
const nginxStreamModule = "/usr/lib/nginx/modules/ngx_stream_module.so"

// ensureTools installs what is missing from needs with apt-get (one
// update, one install), and fails clearly when that is not possible.
func ensureTools(ctx context.Context, needs []need, allowInstall bool) error {
	var missing []string
	for _, n := range needs {
		if !n.present() {
			missing = append(missing, n.pkg)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	hint := "apt-get install -y " + strings.Join(missing, " ")
	if !allowInstall {
		return fmt.Errorf("missing Debian packages (-install=false): %s", hint)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("missing Debian packages and not root: run %q", hint)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	fmt.Fprintf(os.Stderr, "bench: installing %s\n", strings.Join(missing, " "))
	for _, args := range [][]string{{"update"}, append([]string{"install", "-y", "--no-install-recommends"}, missing...)} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %s: %w\n%s", args[0], err, lastLines(string(out), 10))
		}
	}
	for _, n := range needs {
		if !n.present() {
			return fmt.Errorf("package %s installed but still not found", n.pkg)
		}
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
