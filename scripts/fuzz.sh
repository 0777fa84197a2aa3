#!/usr/bin/env bash
# Coverage-guided fuzzing of Burrow's parsers (cargo-fuzz / libFuzzer).
#
#   scripts/fuzz.sh [seconds-per-target] [target...]
#
# Builds the targets of fuzz/ (all of them by default), runs each for the
# given time (default 30 s), one after the other, and prints per target the
# executions and whether it crashed; exits non-zero if any did. A crash's
# input is left in fuzz/artifacts/<target>/ (replay it with
# `cargo fuzz run <target> <file>` in fuzz/); the log of each run is in
# fuzz/target/logs/.
#
# cargo-fuzz needs nightly compiler flags: with a nightly toolchain (rustup)
# it is used, otherwise the stable compiler is told to accept them with
# RUSTC_BOOTSTRAP=1. FUZZ_SANITIZER picks the sanitizer (default none: the
# crates forbid unsafe code, and without one builds and runs are faster;
# `address` needs nightly). FUZZ_JOBS sets the build's parallel jobs.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

secs=${1:-30}
shift || true
sanitizer=${FUZZ_SANITIZER:-none}

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

if command -v rustup >/dev/null 2>&1 && rustup toolchain list | grep -q '^nightly'; then
    fuzz=(cargo +nightly fuzz)
    echo "== toolchain: nightly"
else
    fuzz=(env RUSTC_BOOTSTRAP=1 cargo fuzz)
    echo "== toolchain: $(rustc --version) with RUSTC_BOOTSTRAP=1"
fi
if [ -n "${FUZZ_JOBS:-}" ]; then
    export CARGO_BUILD_JOBS=$FUZZ_JOBS
fi

if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <("${fuzz[@]}" list)
fi

echo "== build (${#targets[@]} targets, sanitizer: $sanitizer)"
if [ $# -gt 0 ]; then
    for t in "${targets[@]}"; do
        "${fuzz[@]}" build -s "$sanitizer" "$t"
    done
else
    "${fuzz[@]}" build -s "$sanitizer"
fi

mkdir -p target/logs
failed=()
summary=()
for t in "${targets[@]}"; do
    echo "== $t: ${secs} s"
    mkdir -p "corpus/$t"
    log="target/logs/$t.log"
    status=ok
    # -timeout: an input that takes 10 s is a hang, reported as a crash.
    if ! "${fuzz[@]}" run -s "$sanitizer" "$t" "corpus/$t" -- \
        -max_total_time="$secs" -timeout=10 -print_final_stats=1 >"$log" 2>&1; then
        status=CRASH
        failed+=("$t")
        tail -n 40 "$log"
    fi
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -n1)
    line=$(printf '%-14s %12s executions  %s' "$t" "${execs:-?}" "$status")
    echo "$line"
    summary+=("$line")
done

echo "== summary"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
    echo "crashes in: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
