#!/usr/bin/env bash
# Runs the given fuzz targets (default: all) ONE AT A TIME, each to a fixed
# number of executions (default 10 million), single process, at the lowest
# priority, continuing from fuzz/corpus/<target>/. This is the run recorded in
# docs/VERIFICATION.md ("Recorded long run"):
#   FUZZ_RUNS=10000000 fuzz/run-long.sh action_json plan_json
# FUZZ_MAX_SECONDS=N also stops each target after N seconds (for the slow
# host targets; the figures then say how far it got).
# FUZZ_SANITIZER=none builds without AddressSanitizer (cargo fuzz's default),
# into target/none so the ASan build is kept. For the host targets, whose
# code under test is safe Rust, it runs several times faster (mcp_lines:
# about 6x); the record must say which build ran.
# Prints libFuzzer's final statistics and the wall time of each target; the
# full log is fuzz/logs/long-<target>.log. Exits non-zero if a target fails
# (its input is left in fuzz/artifacts/<target>/).
set -euo pipefail
cd "$(dirname "$0")"
runs="${FUZZ_RUNS:-10000000}"
if [ "$#" -eq 0 ]; then
    set -- $(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^budgetgate-fuzz$')
fi
mkdir -p logs
status=0
for target in "$@"; do
    mkdir -p "corpus/$target"
    extra=()
    if [ -f "dict/$target.dict" ]; then
        extra=(-dict="dict/$target.dict")
    elif [ "$target" = action_json ] || [ "$target" = plan_json ] || [ "$target" = usage_json ]; then
        extra=(-dict=json.dict)
    fi
    case "$target" in
        # The gateway's notes on stderr cost a third of the time; a failure's
        # panic message is then lost (replay its input to see it).
        mcp_lines) extra+=(-close_fd_mask=2) ;;
    esac
    if [ -n "${FUZZ_MAX_SECONDS:-}" ]; then
        extra+=(-max_total_time="$FUZZ_MAX_SECONDS")
    fi
    build=()
    if [ -n "${FUZZ_SANITIZER:-}" ]; then
        build=(-s "$FUZZ_SANITIZER" --target-dir "target/$FUZZ_SANITIZER")
    fi
    log="logs/long-$target.log"
    start=$(date +%s)
    if nice -n 19 cargo +nightly fuzz run -O "${build[@]}" "$target" "corpus/$target" -- \
        -runs="$runs" -timeout=10 -print_final_stats=1 "${extra[@]}" >"$log" 2>&1; then
        result=ok
    else
        result=FAILED
        status=1
    fi
    end=$(date +%s)
    files=$(find "corpus/$target" -type f | wc -l)
    bytes=$(du -sb "corpus/$target" | cut -f1)
    echo "== $target: $result, $((end - start)) s wall, corpus $files files / $bytes bytes"
    grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE)' "$log" | tail -n 1 || true
    grep -E 'stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' "$log" || true
    if [ "$result" = FAILED ]; then tail -n 40 "$log"; fi
done
exit "$status"
