#!/usr/bin/env bash
# fuzz.sh runs each fuzz target given as PKG:FUNC for FUZZTIME (make fuzz).
#
# Every target runs even when one fails, so that a long run (a nightly
# `make fuzz FUZZTIME=10m`) reports every finding, not the first; the last
# line counts them ("fuzz: N passed, N failed") and the exit status is
# non-zero if any failed. A target that does not exist fails. A finding's input is written under the package's
# testdata/fuzz/FUNC/, where `go test` then runs it as a regression case.
#
# Go 1.26's fuzz coordinator can fail a target with a bare "context deadline
# exceeded" at the -fuzztime boundary when the machine is busy: a race in
# the coordinator's shutdown, not a finding (golang/go#75804, fixed in Go
# 1.27). A real finding always writes its input ("Failing input written
# to ..."), so a failure without one whose only complaint is that deadline
# is run once more; any other failure counts as failed at once.
set -uo pipefail
FUZZTIME=${FUZZTIME:-8s}
passed=0 failed=()
for t in "$@"; do
  pkg=${t%%:*} fn=${t##*:}
  ok=0
  for attempt in 1 2; do
    echo "fuzz $pkg $fn for $FUZZTIME"
    log=$(mktemp)
    # -timeout covers only the seed corpus run before fuzzing; the
    # fuzzing itself runs for -fuzztime, however long.
    go test -run='^$' -fuzz="^${fn}\$" -fuzztime="$FUZZTIME" "$pkg" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    if grep -q 'no fuzz tests to fuzz' "$log"; then
      # A target that does not exist (renamed, misspelt) fuzzes nothing
      # and go test passes: that must not look like a pass here.
      echo "fuzz: $pkg has no fuzz target $fn"
      rm -f "$log"
      break
    fi
    if [ "$rc" -eq 0 ]; then ok=1; rm -f "$log"; break; fi
    if [ "$attempt" -eq 1 ] && grep -q 'context deadline exceeded' "$log" &&
       ! grep -qE 'Failing input written|panic:|_test\.go:[0-9]+:' "$log"; then
      echo "fuzz: $fn hit Go's fuzztime deadline race (golang/go#75804), no failing input; running it again"
      rm -f "$log"
      continue
    fi
    rm -f "$log"
    break
  done
  if [ "$ok" -eq 1 ]; then
    passed=$((passed + 1))
  else
    failed+=("$pkg:$fn")
  fi
done
for f in "${failed[@]}"; do echo "fuzz: FAILED $f"; done
echo "fuzz: $passed passed, ${#failed[@]} failed"
[ "${#failed[@]}" -eq 0 ]
