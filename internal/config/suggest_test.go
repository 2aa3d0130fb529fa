package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestUnknownNamesSuggestTheKey: a key, variable or flag that is none
// names the one it most likely meant, as an operator writes a key in the
// file as its flag (data-dir, the kebab case of flags) or a variable from
// the key rather than the flag (GATEHOUSE_DATA_DIR; the variable is
// GATEHOUSE_DATA), or misspells one. A name close to none gets no hint.
func TestUnknownNamesSuggestTheKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		file string
		env  []string
		args []string
		want string
	}{
		{name: "misspelt key", file: "http:\n  mdoe: serve\n", want: `unknown key "http.mdoe" (did you mean "http.mode"?)`},
		{name: "kebab-case key", file: "data-dir: /tmp/x\n", want: `unknown key "data-dir" (did you mean "data_dir"?)`},
		{name: "dotted kebab-case key", file: "listeners:\n  max-connections: 5\n", want: `unknown key "listeners.max-connections" (did you mean "listeners.max_connections"?)`},
		{name: "flag as key", file: "http-mode: serve\n", want: `unknown key "http-mode" (did you mean "http.mode"?)`},
		{name: "far key", file: "colour: red\n", want: `unknown key "colour"` + "\n"},
		{name: "variable from the key", env: []string{"GATEHOUSE_DATA_DIR=/tmp/x"}, want: "unknown environment variable GATEHOUSE_DATA_DIR (did you mean GATEHOUSE_DATA?)"},
		{name: "misspelt variable", env: []string{"GATEHOUSE_HTTPMODE=serve"}, want: "unknown environment variable GATEHOUSE_HTTPMODE (did you mean GATEHOUSE_HTTP_MODE?)"},
		{name: "misspelt config variable", env: []string{"GATEHOUSE_CONFG=x.yaml"}, want: "unknown environment variable GATEHOUSE_CONFG (did you mean GATEHOUSE_CONFIG?)"},
		{name: "far variable", env: []string{"GATEHOUSE_COLOUR=red"}, want: "unknown environment variable GATEHOUSE_COLOUR\n"},
		{name: "misspelt flag", args: []string{"-htp-mode=serve"}, want: "flag provided but not defined: -htp-mode (did you mean -http-mode?)"},
		{name: "key as flag", args: []string{"-data-dir", "/tmp/x"}, want: "flag provided but not defined: -data-dir (did you mean -data?)"},
		{name: "misspelt config flag", args: []string{"-confg", "x.yaml"}, want: "flag provided but not defined: -confg (did you mean -config?)"},
		{name: "far flag", args: []string{"-colour"}, want: "flag provided but not defined: -colour\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				path := filepath.Join(t.TempDir(), "gatehouse.yaml")
				writeFile(t, path, tc.file)
				args = append(args, "-config", path)
			}
			_, err := Load(args, tc.env)
			// The want ends the error; a want ending in a new line ends it
			// with no hint.
			if want := strings.TrimSuffix(tc.want, "\n"); err == nil || !strings.HasSuffix(err.Error(), want) {
				t.Errorf("got %v\nwant an error ending %s", err, want)
			}
		})
	}
}
