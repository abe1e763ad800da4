#!/usr/bin/env bash
# run.sh — runs both libFuzzer targets, seeded with the topology fixtures. By default a fixed
# seed and a fixed number of inputs, so that `make check` is reproducible: what fails in CI fails
# here with the same inputs. LOOM_FUZZ_SECONDS=N explores instead: a random seed for N seconds
# per target (`make fuzz`). Any crash, abort or timeout in Loom's code fails the test.
. "$(dirname "$0")/../integration/lib.sh"
B=$LOOM_BUILDDIR/tests/fuzz
[ -x "$B/fuzz_nvsmi" ] || skip "fuzz targets not built (configure --enable-fuzzing)"
for target in nvsmi hwloc_xml; do
  corpus=$LOOM_TMP/corpus-$target
  mkdir -p "$corpus"
  if [ $target = nvsmi ]; then cp "$LOOM_FIXTURES"/*.nvsmi.txt "$corpus/"; else cp "$LOOM_FIXTURES"/local-*.xml "$LOOM_FIXTURES"/cpu-only.xml "$LOOM_FIXTURES"/crashers/*.xml "$LOOM_FIXTURES"/fuzz-regressions/*.xml "$corpus/"; fi
  # hwloc keeps process-wide state for its XML backends; leaks inside it are not ours to fix.
  # The XML target forks a child per input (see hwloc_reader.cpp), so crashes inside hwloc
  # itself are caught there and must not fail the run; crashes in Loom's code still do.
  if [ -n "${LOOM_FUZZ_SECONDS:-}" ]; then
    budget="-max_total_time=$LOOM_FUZZ_SECONDS"
  else  # about 15 s each here; the time cap only guards a much slower machine
    budget="-seed=20261129 -max_total_time=120 -runs=$([ $target = nvsmi ] && echo 30000 || echo 300)"
  fi
  ASAN_OPTIONS=detect_leaks=0 "$B/fuzz_$target" $budget -timeout=30 -rss_limit_mb=2048 \
    -artifact_prefix="$LOOM_TMP/" "$corpus" >"$LOOM_TMP/$target.log" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    pass
    echo "fuzz_$target: $(grep -Eo 'Done [0-9]+ runs in [0-9]+ second.*' "$LOOM_TMP/$target.log" | head -1)"
  else
    fail "fuzz_$target exited $rc"
    tail -n 40 "$LOOM_TMP/$target.log" >&2
    ls "$LOOM_TMP"/crash-* "$LOOM_TMP"/timeout-* 2>/dev/null | while read -r f; do echo "input: $f"; head -c 400 "$f" | od -c | head; done >&2
  fi
done
finish
