#!/usr/bin/env bash
# Runs each Fuzz target in the module for FUZZTIME (default 8s). go test
# -fuzz takes one target per run, so they are found and run one by one.
set -euo pipefail
FUZZTIME=${FUZZTIME:-8s}
go list -f '{{.ImportPath}} {{.Dir}}' ./... | while read -r pkg dir; do
  grep -hoE '^func (Fuzz[A-Za-z0-9_]+)\(' "$dir"/*_test.go 2>/dev/null | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/' | sort -u | while read -r f; do
    echo "fuzz $pkg $f ($FUZZTIME)"
    go test -run '^$' -fuzz "^${f}\$" -fuzztime "$FUZZTIME" "$pkg"
  done
done
