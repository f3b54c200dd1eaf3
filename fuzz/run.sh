#!/usr/bin/env bash
# Fuzz every herald target for a while; exit non-zero if any input crashes, hangs or blows
# the memory limit.
#
#   bash fuzz/run.sh --smoke              what CI runs: 20 s per target on a quick build
#                                         (unoptimized, no sanitizer: about 1.5 min cold
#                                         instead of 5-6; safe Rust gains little from ASan)
#   bash fuzz/run.sh [seconds]            all targets, release build with ASan (default 20 s)
#   FUZZ_TARGETS="endpoint_url" bash fuzz/run.sh 600
#   FUZZ_NICE=10 bash fuzz/run.sh 600     leave the CPU to others
#   FUZZ_TARGET_DIR=~/.cache/herald-fuzz bash fuzz/run.sh 20
#                                         build outside the checkout, so a fresh clone (CI)
#                                         reuses the dependencies built last time: about 2 min
#                                         instead of 6-11 min for a cold build on 2 cores
#
# libFuzzer needs nightly-only rustc flags; RUSTC_BOOTSTRAP=1 lets the stable toolchain take
# them. Builds go to fuzz/target (not the root crate's target/). Each target starts from its
# hand-written seeds (fuzz/seeds/<target>, read only) plus whatever earlier runs left in
# fuzz/corpus/<target> (git-ignored, grows), with the tokens of fuzz/dicts/<target>.dict. What
# each target checks, and why, is in fuzz/checks.rs. A crashing input is saved under
# fuzz/artifacts/<target>/; copy it to fuzz/regressions/<target>/ and add a test to
# tests/command/fuzz_regressions.rs.
set -euo pipefail
cd "$(dirname "$0")"

build_flags=()
if [[ "${1:-}" == "--smoke" ]]; then
  shift
  build_flags=(--dev --sanitizer none)
fi
seconds="${1:-20}"
targets="${FUZZ_TARGETS:-ingest_body config_toml endpoint_url}"
nice_level="${FUZZ_NICE:-0}"
export RUSTC_BOOTSTRAP=1
# Never the root crate's target dir: the fuzz build's RUSTFLAGS (coverage, sanitizer) differ
# and would make the two rebuild each other.
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-$PWD/target}"
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
started=$SECONDS

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install cargo-fuzz --locked
  echo "== cargo-fuzz installed in $((SECONDS - started))s"
fi

build_started=$SECONDS
# By default a release build with debug assertions (overflow checks) and AddressSanitizer,
# cargo-fuzz's defaults; --smoke builds unoptimized (debug assertions on) without a sanitizer.
nice -n "$nice_level" cargo fuzz build "${build_flags[@]}"
echo "== fuzz targets built in $((SECONDS - build_started))s"

failed=()
for t in $targets; do
  mkdir -p "corpus/$t"
  echo "== fuzzing $t for ${seconds}s"
  # -timeout: one input running 10 s is a hang. -rss_limit_mb/-malloc_limit_mb: a single
  # allocation or a total of 2 GiB is a bug (request bodies are at most a few hundred KiB).
  # No stdin, so nothing can block reading it.
  # -dict: tokens (config keys, URL notations, JSON escapes) the mutator splices in.
  if ! nice -n "$nice_level" cargo fuzz run "${build_flags[@]}" "$t" "corpus/$t" "seeds/$t" -- \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
      -dict="dicts/$t.dict" -print_final_stats=1 </dev/null; then
    failed+=("$t")
  fi
done

echo "== fuzzing took $((SECONDS - started))s in all"
if ((${#failed[@]})); then
  echo "FUZZING FAILED (crash, hang, out of memory, or no build) in: ${failed[*]}; inputs under fuzz/artifacts/" >&2
  exit 1
fi
echo "no crashes in: $targets"
