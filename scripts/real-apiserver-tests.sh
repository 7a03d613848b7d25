#!/usr/bin/env bash
# Runs the tests named real_apiserver (ignored in the default run) against real control planes,
# after checking that the tests found are exactly those tests/real-apiserver-tests.txt lists: a
# test that lost its #[ignore] (it would run, and fail or pass, without a control plane), was
# renamed or removed drops out of this run, and this fails instead of running fewer tests.
# A new real test is added to the list in the same change.
#
#   scripts/real-apiserver-tests.sh           # check the list, then run the tests
#   scripts/real-apiserver-tests.sh --list    # print the tests found, one per line (the list)
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
LIST=tests/real-apiserver-tests.txt

# Test paths (`module::name`), sorted, whichever runner lists them.
found() {
  if $CARGO nextest --version >/dev/null 2>&1; then
    $CARGO nextest list --locked --workspace --run-ignored only -E 'test(/real_apiserver/)' \
      --message-format oneline | awk '{ print $NF }'
  else
    $CARGO test --locked --workspace -- --ignored --list --format terse 2>/dev/null \
      | sed -n 's/: test$//p' | grep real_apiserver
  fi | LC_ALL=C sort
}

if [ "${1:-}" = --list ]; then
  found
  exit
fi

tests=$(found)
kept=$(grep -v '^#' "$LIST" | sed '/^$/d' | LC_ALL=C sort)
missing=$(LC_ALL=C comm -23 <(echo "$kept") <(echo "$tests"))
extra=$(LC_ALL=C comm -13 <(echo "$kept") <(echo "$tests"))
if [ -n "$missing" ] || [ -n "$extra" ]; then
  [ -z "$missing" ] || printf 'real-apiserver-test: listed in %s but not found among the ignored tests named real_apiserver (renamed, removed, or no longer #[ignore]d):\n%s\n' "$LIST" "$missing" >&2
  [ -z "$extra" ] || printf 'real-apiserver-test: found but not listed in %s (add them: scripts/real-apiserver-tests.sh --list prints the list):\n%s\n' "$LIST" "$extra" >&2
  exit 1
fi
count=$(echo "$tests" | wc -l)
echo "real-apiserver-test: the $count tests of $LIST" >&2

if $CARGO nextest --version >/dev/null 2>&1; then
  $CARGO nextest run --locked --workspace --no-fail-fast --run-ignored only -E 'test(/real_apiserver/)'
else
  $CARGO test --locked --workspace --no-fail-fast -- --ignored real_apiserver
fi
