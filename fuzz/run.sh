#!/usr/bin/env bash
# Builds one fuzz target with libFuzzer on the stable toolchain and runs it for RUNS executions
# over its committed corpus, then prints the execution count, the time and the crash count.
#
#   fuzz/run.sh TARGET [RUNS] [extra libFuzzer flags...]     (RUNS: 1000000 by default)
#   fuzz/run.sh build                                         (builds every target, runs none)
#
# Why these flags: cargo-fuzz's default (`-Zsanitizer=address`) needs nightly. The coverage
# instrumentation libFuzzer needs is LLVM's SanitizerCoverage pass, which stable rustc runs with
# `-Cpasses=sancov-module` and `-Cllvm-args=...` (both stable flags). That is exactly what
# `cargo fuzz build --sanitizer none` passes; this script passes it by hand so that nothing but
# cargo is needed. `--target` keeps the flags off build scripts and proc macros (as cargo-fuzz
# does). No AddressSanitizer: the code under test has no `unsafe` (`unsafe_code = "forbid"`).
#
# New inputs that libFuzzer finds go to fuzz/artifacts/ (crashes) and target/fuzz-corpus/TARGET
# (coverage growth); copy the useful ones into fuzz/corpus/TARGET by hand.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
target="${1:?usage: fuzz/run.sh TARGET|build [RUNS] [libFuzzer flags...]}"
runs="${2:-1000000}"
shift $(( $# >= 2 ? 2 : $# ))

triple="$(rustc -vV | sed -n 's/^host: //p')"
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares ${RUSTFLAGS_EXTRA:-}"
export CARGO_INCREMENTAL=0
target_dir="${CARGO_TARGET_DIR:-$here/../target}"

bins=()
if [ "$target" != build ]; then bins=(--bin "$target"); fi
nice -n 19 cargo build --manifest-path "$here/Cargo.toml" --release --target "$triple" \
  -j "${FUZZ_JOBS:-1}" "${bins[@]}"
[ "$target" = build ] && exit 0

work="$target_dir/fuzz-corpus/$target"
artifacts="$here/artifacts/$target"
mkdir -p "$work" "$artifacts"
log="$target_dir/fuzz-$target.log"
start=$(date +%s)
set +e
# The first corpus directory receives new inputs; the committed one is only read.
nice -n 19 "$target_dir/$triple/release/$target" "$work" "$here/corpus/$target" \
  -runs="$runs" -max_len=65536 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
  -artifact_prefix="$artifacts/" "$@" >"$log" 2>&1
status=$?
set -e
end=$(date +%s)
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
crashes=$(find "$artifacts" -type f | wc -l)
tail -n 25 "$log" | grep -E '^(#|stat::|==|SUMMARY|Done)' | tail -n 12 || true
echo "target=$target executions=${execs:-?} seconds=$((end - start)) crashes=$crashes exit=$status log=$log"
[ "$status" -eq 0 ] && [ "$crashes" -eq 0 ]
