#!/usr/bin/env bash
# THE test command (README, .ci/run): install what is missing, build both LibTorch legs and
# run each leg's ctest. Ends with one line `total: N passed, N failed` counting ctest tests of
# both legs; a leg whose build fails counts as one failed test. Exits non-zero on any failure.
#
# Environment: FSDP_OPT_LEGS (default "t113 t2"), FSDP_OPT_CTEST_JOBS (default 2),
# FSDP_OPT_SKIP_DEPS=1 to skip scripts/install-deps.sh.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

if [ "${FSDP_OPT_SKIP_DEPS:-0}" != 1 ]; then
  bash scripts/install-deps.sh || { echo "test.sh: scripts/install-deps.sh failed"; echo "total: 0 passed, 1 failed"; exit 1; }
fi

passed=0
failed=0
timings=()
for leg in ${FSDP_OPT_LEGS:-t113 t2}; do
  echo "=== $leg: build"
  start=$SECONDS
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
