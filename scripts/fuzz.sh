#!/usr/bin/env bash
# Fuzzing with cargo-fuzz (libFuzzer): builds the targets of fuzz/ and runs each for a bounded
# time, starting from its seed corpus fuzz/corpus/<target>/. New inputs go to a working corpus
# (a temporary directory by default), so the committed corpus never changes. See docs/fuzzing.md.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     # default 30 s, every target
#
# Environment:
#   FUZZ_SANITIZER  address (default) or none (no AddressSanitizer: faster runs; only for code
#                   without `unsafe`: the operator's review reader and apply-annotation scan use
#                   unsafe SIMD intrinsics, src/admission/reader.rs and applied.rs)
#   FUZZ_PROFILE    release (default: optimised, slow to build) or dev (unoptimised: builds in
#                   less than half the time, runs several times slower; for short runs)
#   FUZZ_WORK_DIR   keep the working corpora in this directory (e.g. fuzz/work) instead of a
#                   temporary one; a later run goes on from what it holds
#   FUZZ_ARGS       extra libFuzzer arguments, e.g. "-jobs=2" or "-only_ascii=1"
#
# cargo-fuzz is installed into .tools/ on first use. It needs nightly Rust features: the nightly
# toolchain when rustup has one, else the stable toolchain with RUSTC_BOOTSTRAP=1.
# Every target runs even when one fails; a crashing input is kept in fuzz/artifacts/<target>/,
# the libFuzzer output in fuzz/logs/<target>.log, and the exit status is 1.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_FUZZ_VERSION=0.13.2
TOOLS=$PWD/.tools

seconds=${1:-30}
shift || true
case $seconds in
'' | *[!0-9]*)
  echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]" >&2
  exit 2
  ;;
esac
sanitizer=${FUZZ_SANITIZER:-address}
profile=${FUZZ_PROFILE:-release}
case $profile in
release) profile_flag=() ;;
dev) profile_flag=(--dev) ;;
*)
  echo "FUZZ_PROFILE must be release or dev" >&2
  exit 2
  ;;
esac

if ! "$TOOLS/bin/cargo-fuzz" --version 2>/dev/null | grep -qx "cargo-fuzz $CARGO_FUZZ_VERSION"; then
  echo "installing cargo-fuzz $CARGO_FUZZ_VERSION into $TOOLS"
  cargo install --locked --quiet --root "$TOOLS" cargo-fuzz --version "$CARGO_FUZZ_VERSION"
fi
export PATH="$TOOLS/bin:$PATH"

cargo=(cargo)
if command -v rustup >/dev/null && rustup toolchain list | grep -q '^nightly-'; then
  cargo=(cargo +nightly)
  reproduce="cargo +nightly fuzz"
else
  # cargo-fuzz passes -Z flags (the sanitizer) to rustc.
  export RUSTC_BOOTSTRAP=1
  reproduce="RUSTC_BOOTSTRAP=1 cargo fuzz"
fi
echo "toolchain: $("${cargo[@]}" --version), sanitizer: $sanitizer, profile: $profile"

# cargo-fuzz has no --locked: check the lock file first, so that the build cannot change it.
if ! "${cargo[@]}" fetch --locked --quiet --manifest-path fuzz/Cargo.toml; then
  echo "fuzz/Cargo.lock is out of date (did the dependencies in Cargo.toml change?)." >&2
  echo "Update it with: cargo update --manifest-path fuzz/Cargo.toml --workspace" >&2
  exit 1
fi

# Debug assertions (overflow checks) on in both profiles; the build goes to fuzz/target.
build=(--fuzz-dir fuzz --sanitizer "$sanitizer" --debug-assertions "${profile_flag[@]}" --target-dir fuzz/target)
if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <("${cargo[@]}" fuzz list --fuzz-dir fuzz)
fi
started=$SECONDS
"${cargo[@]}" fuzz build "${build[@]}"
echo "build: $((SECONDS - started)) s"

# The binaries run directly (`cargo fuzz run` would build again first).
host=$(rustc -vV | sed -n 's/^host: //p')
bin_dir=fuzz/target/$host/$([ "$profile" = dev ] && echo debug || echo release)
if [ "$sanitizer" = address ]; then
  export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_odr_violation=0
fi

work=${FUZZ_WORK_DIR:-}
if [ -z "$work" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p fuzz/logs

failed=()
for target in "${targets[@]}"; do
  mkdir -p "$work/$target" "fuzz/artifacts/$target"
  args=(-artifact_prefix="fuzz/artifacts/$target/" -max_total_time="$seconds" -timeout=30
    -rss_limit_mb=4096 -print_final_stats=1)
  if [ -f "fuzz/dict/$target.dict" ]; then
    args+=(-dict="fuzz/dict/$target.dict")
  fi
  # shellcheck disable=SC2206 # FUZZ_ARGS is a list of arguments
  args+=(${FUZZ_ARGS:-})
  log=fuzz/logs/$target.log
  echo "fuzzing $target for $seconds s (log: $log)"
  # The working corpus comes first: libFuzzer writes new inputs only into the first directory.
  if "$bin_dir/$target" "${args[@]}" "$work/$target" "fuzz/corpus/$target" >"$log" 2>&1; then
    # e.g. "#41337 DONE   cov: 5120 ft: 17000 corp: 512/96Kb lim: 4096 exec/s: 1377 rss: 180Mb"
    grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 | sed "s/^/  $target: /"
  else
    failed+=("$target")
    echo "  $target FAILED; the end of its log:"
    tail -n 60 "$log" | sed 's/^/    /'
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing failed: ${failed[*]} (inputs in fuzz/artifacts/, reproduce with" >&2
  echo "  $reproduce run ${build[*]} TARGET fuzz/artifacts/TARGET/FILE)" >&2
  exit 1
fi
echo "fuzzing ok: ${targets[*]}, $seconds s each"
