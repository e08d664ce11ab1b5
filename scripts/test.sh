#!/usr/bin/env bash
# THE test command (README, .ci/run): install what is missing, build both LibTorch legs and
# run each leg's ctest, then the sanitizer leg (scripts/sanitize.sh: the t113 leg under
# ASan+UBSan, its unit tests and an end-to-end subset). Ends with one line
# `total: N passed, N failed` counting the tests of every leg; a leg whose build fails counts as
# one failed test. Exits non-zero on any failure.
#
# The sanitizer leg is skipped, and says so, when the run has taken longer than
# FSDP_OPT_ASAN_START_BY_S (default 1500 s) before it: that happens only with cold caches (a
# fresh machine: about 50 minutes for the two legs), and a cold build of the leg itself costs
# up to about 21 minutes more, which would take the run past CI's 60. With warm caches the two
# legs take about 14 minutes and the sanitizer leg about 7 (README, "CI time").
#
# Environment: FSDP_OPT_LEGS (default "t113 t2 asan"), FSDP_OPT_CTEST_JOBS (default 2),
# FSDP_OPT_ASAN_START_BY_S, FSDP_OPT_SKIP_DEPS=1 to skip scripts/install-deps.sh.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

if [ "${FSDP_OPT_SKIP_DEPS:-0}" != 1 ]; then
  bash scripts/install-deps.sh || { echo "test.sh: scripts/install-deps.sh failed"; echo "total: 0 passed, 1 failed"; exit 1; }
fi

passed=0
failed=0
timings=()
for leg in ${FSDP_OPT_LEGS:-t113 t2 asan}; do
  start=$SECONDS
  if [ "$leg" = asan ]; then
    if ((SECONDS > ${FSDP_OPT_ASAN_START_BY_S:-1500})); then
      echo "=== asan: SKIPPED: this run had taken ${SECONDS}s before it (cold caches?), and a cold build of it could end the run past 60 minutes; run bash scripts/sanitize.sh on its own"
      timings+=("asan: skipped, started too late (${SECONDS}s > ${FSDP_OPT_ASAN_START_BY_S:-1500}s)")
      continue
    fi
    echo "=== asan: scripts/sanitize.sh"
    log=build/sanitize-output.log
    mkdir -p build
    bash scripts/sanitize.sh 2>&1 | tee "$log"
    asan_rc=${PIPESTATUS[0]}
    # Its last count line: "sanitize.sh: N passed, N failed". None (the build failed): 1 failed.
    counts=$(grep -E '^sanitize\.sh: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1) || true
    if [ -n "$counts" ]; then
      leg_passed=$(sed -E 's/^sanitize\.sh: ([0-9]+) passed.*/\1/' <<<"$counts")
      leg_failed=$(sed -E 's/.* ([0-9]+) failed$/\1/' <<<"$counts")
    else
      leg_passed=0 leg_failed=1
      echo "=== asan: no test counts (rc $asan_rc), counted as 1 failed test"
    fi
    if [ "$asan_rc" -ne 0 ] && [ "$leg_failed" -eq 0 ]; then
      leg_failed=1
      echo "=== asan: scripts/sanitize.sh exited $asan_rc with no failed test, counted as 1 failed test"
    fi
    passed=$((passed + leg_passed))
    failed=$((failed + leg_failed))
    timings+=("asan: build and tests $((SECONDS - start))s, $leg_passed/$((leg_passed + leg_failed)) passed")
    continue
  fi

  echo "=== $leg: build"
  if ! bash scripts/build.sh "$leg"; then
    echo "=== $leg: BUILD FAILED (counted as 1 failed test)"
    failed=$((failed + 1))
    timings+=("$leg: build failed after $((SECONDS - start))s")
    continue
  fi
  built=$SECONDS

  echo "=== $leg: ctest"
  log=build/$leg/ctest-output.log
  ctest --test-dir "build/$leg" --output-on-failure -j "${FSDP_OPT_CTEST_JOBS:-2}" 2>&1 | tee "$log"
  ctest_rc=${PIPESTATUS[0]}
  # ctest's summary: "NN% tests passed, F tests failed out of T".
  summary=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1)
  if [ -n "$summary" ]; then
    leg_failed=$(sed -E 's/.* ([0-9]+) tests? failed out of.*/\1/' <<<"$summary")
    leg_total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$summary")
  else
    # No summary: ctest found no tests or could not run at all. Neither is a pass.
    leg_failed=1
    leg_total=1
    echo "=== $leg: ctest ran no tests (rc $ctest_rc), counted as 1 failed test"
  fi
  if [ "$ctest_rc" -ne 0 ] && [ "$leg_failed" -eq 0 ]; then
    leg_failed=1
    leg_total=$((leg_total + 1))
    echo "=== $leg: ctest exited $ctest_rc with no failed test, counted as 1 failed test"
  fi
  passed=$((passed + leg_total - leg_failed))
  failed=$((failed + leg_failed))
  timings+=("$leg: build $((built - start))s, ctest $((SECONDS - built))s, $((leg_total - leg_failed))/$leg_total passed")
done

echo "=== timing"
printf '  %s\n' "${timings[@]}"
echo "total: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
