#!/usr/bin/env bash
# Runs each Fuzz target in the module for FUZZTIME executions (default
# 20000x). A count, not a duration: with a time budget go1.26 can fail a
# healthy target with "context deadline exceeded" (golang/go#75804). go test
# -fuzz takes one target per run, so the targets are listed first and run
# one by one.
set -euo pipefail
FUZZTIME=${FUZZTIME:-20000x}
targets=()
while read -r pkg dir; do
  for f in $(grep -hoE '^func Fuzz[A-Za-z0-9_]+\(' "$dir"/*_test.go 2>/dev/null | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/' | sort -u); do
    targets+=("$pkg $f")
  done
done < <(go list -f '{{.ImportPath}} {{.Dir}}' ./...)
echo "fuzz: ${#targets[@]} targets, $FUZZTIME each"
for t in "${targets[@]}"; do
  read -r pkg f <<<"$t"
  echo "fuzz $pkg $f"
  timeout 300 go test -run '^$' -fuzz "^${f}\$" -fuzztime "$FUZZTIME" "$pkg" </dev/null
done
