#!/usr/bin/env bash
# Source coverage of each target's corpus (fuzz/corpus/<target>/): builds the
# target with coverage instrumentation (`cargo +nightly fuzz coverage`), runs
# every corpus input once, and prints llvm-cov's line and region coverage
# of the files that target reads untrusted bytes with (listed below).
# Needs the nightly `llvm-tools` component:
#   rustup component add llvm-tools --toolchain nightly
#   fuzz/coverage.sh [TARGET...]          (default: every target)
# Full reports: fuzz/logs/coverage-<target>.txt.
set -euo pipefail
cd "$(dirname "$0")"
host=$(rustc +nightly -vV | sed -n 's/^host: //p')
cov="$(rustc +nightly --print sysroot)/lib/rustlib/$host/bin/llvm-cov"
[ -x "$cov" ] || { echo "llvm-cov missing: rustup component add llvm-tools --toolchain nightly" >&2; exit 1; }

files_of() {
    case "$1" in
        action_json) echo ../core/src/action/mod.rs ../core/src/action/scan.rs ../core/src/action/scan/document.rs ../core/src/action/view.rs ../core/src/json.rs ../core/src/pyjson.rs ;;
        plan_json) echo ../core/src/plan/mod.rs ../core/src/plan/read.rs ../core/src/plan/limits.rs ../core/src/plan/workflow.rs ../core/src/limits.rs ../core/src/json.rs ;;
        run_events) echo ../core/src/run/mod.rs ../core/src/run/trace.rs ../core/src/run/tool_set.rs ../core/src/run/verdict.rs ;;
        link_frames) echo ../core/src/link.rs ;;
        ledger_record) echo ../core/src/budget.rs ;;
        usage_json) echo ../core/src/turn/usage.rs ../core/src/json.rs ;;
        duty_window) echo ../core/src/budget.rs ;;
        hook_event) echo ../host/src/hook.rs ../host/src/transcript/line.rs ../host/src/gate/mod.rs ../host/src/store/mod.rs ../host/src/store/sqlite/mod.rs ../host/src/store/sqlite/tx.rs ;;
        hook_transcript) echo ../host/src/transcript/line.rs ;;
        mcp_lines) echo ../host/src/mcp/lines.rs ../host/src/mcp/stdio.rs ;;
        replay_formats) echo ../host/src/replay/mod.rs ../host/src/replay/decide.rs ../host/src/replay/decide/loops.rs ../host/src/replay/rows.rs ../host/src/replay/report.rs ../host/src/replay/read/*.rs ../host/src/replay/session.rs ;;
        *) echo "unknown target $1" >&2; return 1 ;;
    esac
}

if [ "$#" -eq 0 ]; then
    set -- $(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^budgetgate-fuzz$')
fi
mkdir -p logs
for target in "$@"; do
    files=$(for f in $(files_of "$target"); do realpath "$f"; done)
    nice -n 19 cargo +nightly fuzz coverage -O "$target" "corpus/$target" >"logs/coverage-$target.log" 2>&1 \
        || { echo "!! $target: coverage run failed (logs/coverage-$target.log)"; tail -n 20 "logs/coverage-$target.log"; continue; }
    bin="target/$host/coverage/$host/release/$target"
    # shellcheck disable=SC2086
    "$cov" report "$bin" -instr-profile="coverage/$target/coverage.profdata" $files >"logs/coverage-$target.txt"
    echo "== $target ($(find "corpus/$target" -type f | wc -l) inputs): $(tail -n 1 "logs/coverage-$target.txt" | awk '{printf "regions %s (%s of %s missed), lines %s (%s of %s missed)", $4, $3, $2, $10, $9, $8}')"
done
