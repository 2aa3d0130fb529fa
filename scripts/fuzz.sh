#!/usr/bin/env bash
# Runs each Fuzz target in the module for FUZZTIME executions (default
# 20000x). A count, not a duration: with a time budget go1.26 can fail a
# healthy target with "context deadline exceeded" (golang/go#75804). go test
# -fuzz takes one target per run, so the targets are listed first and run
# one by one.
#
# FUZZCAP bounds each target in seconds (default 300: at CI's count a
# target that runs that long is stuck, and fails). With FUZZCAP_OK=1 (make
# fuzz-long) reaching the cap is the plan, not a failure: a long count is
# cut at the cap, every target runs even after one fails, and the run fails
# at the end if any target found a failing input. FUZZPKGS narrows the
# packages (default ./...).
set -uo pipefail
FUZZTIME=${FUZZTIME:-20000x}
FUZZCAP=${FUZZCAP:-300}
FUZZCAP_OK=${FUZZCAP_OK:-0}
targets=()
while read -r pkg dir; do
  for f in $(grep -hoE '^func Fuzz[A-Za-z0-9_]+\(' "$dir"/*_test.go 2>/dev/null | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/' | sort -u); do
    targets+=("$pkg $f")
  done
done < <(go list -f '{{.ImportPath}} {{.Dir}}' ${FUZZPKGS:-./...})
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: no Fuzz targets in ${FUZZPKGS:-./...}"
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, $FUZZTIME each, at most ${FUZZCAP}s each"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
failed=()
for t in "${targets[@]}"; do
  read -r pkg f <<<"$t"
  echo "fuzz $pkg $f"
  timeout "$FUZZCAP" go test -run '^$' -fuzz "^${f}\$" -fuzztime "$FUZZTIME" "$pkg" </dev/null 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  # A failure found just before the cap can be cut off while it is being
  # minimized: the output, not only the exit code, decides.
  if grep -qE '^--- FAIL|Failing input written' "$out"; then
    rc=1
  elif [ "$rc" = 124 ] && [ "$FUZZCAP_OK" = 1 ]; then
    echo "fuzz: $f reached ${FUZZCAP}s without a failure"
    rc=0
  fi
  if [ "$rc" != 0 ]; then
    failed+=("$pkg $f (exit $rc)")
    [ "$FUZZCAP_OK" = 1 ] || { echo "fuzz: $pkg $f failed"; exit 1; }
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  printf 'fuzz: failed: %s\n' "${failed[@]}"
  exit 1
fi
