#!/usr/bin/env bash
# Runs every fuzz target for a short fixed time (default 20 s each) from a
# corpus seeded with the reference vectors. CI calls this; a longer run is
#   FUZZ_SECONDS=300 fuzz/run-short.sh
# Needs: cargo-fuzz (`cargo install cargo-fuzz`) and a nightly toolchain.
# Exits non-zero if any target fails; the failing input is left in
# fuzz/artifacts/<target>/ (replay it with `cargo +nightly fuzz run <target> <file>`).
set -euo pipefail
cd "$(dirname "$0")"

seconds="${FUZZ_SECONDS:-20}"
# 13 targets × 20 s ≈ 4.5 min of fuzzing, plus one build of the fuzz crate
# (about 8 min from nothing: the host targets build budgetgate with SQLite).
targets=(action_json plan_json run_events link_frames ledger_record usage_json duty_window
         hook_event hook_transcript mcp_lines replay_formats run_record sse_stream)

if ! cargo +nightly --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

python3 seed-corpus.py
cargo +nightly fuzz build -O
mkdir -p logs
status=0
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target"
    log="logs/$target.log"
    echo "== $target: ${seconds}s"
    extra=()
    if [ "$target" = action_json ] || [ "$target" = plan_json ] || [ "$target" = usage_json ]; then
        extra=(-dict=json.dict)
    fi
    if cargo +nightly fuzz run -O "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -timeout=10 -print_final_stats=1 "${extra[@]}" >"$log" 2>&1; then
        grep -E '^(#[0-9]+[[:space:]]+DONE|Done [0-9]+ runs)|stat::(number_of_executed_units|peak_rss_mb|new_units_added)' "$log" || true
    else
        echo "!! $target failed; last lines of $log:"
        tail -n 40 "$log"
        status=1
    fi
done
if [ "$status" -eq 0 ]; then
    echo "fuzz: all targets ran ${seconds}s without a failure"
fi
exit "$status"
