package testutil

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

// SyncBuffer is a bytes.Buffer that a server's goroutines may write to
// (a logger's output, a child process's) while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// CheckJSONLog fails t unless every line of log is a JSON object that
// names each key once: a repeated key (two loggers' With adding the same
// attribute) is refused by strict parsers, and jq keeps only one of them.
func CheckJSONLog(t testing.TB, log string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		dec := json.NewDecoder(strings.NewReader(line))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			t.Fatalf("log line is not a JSON object: %s", line)
		}
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				t.Fatalf("%v: %s", err, line)
			}
			key, _ := k.(string)
			if seen[key] {
				t.Errorf("key %q twice: %s", key, line)
			}
			seen[key] = true
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("%v: %s", err, line)
			}
		}
	}
}
