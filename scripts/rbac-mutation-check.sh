#!/usr/bin/env bash
# The e2e suite runs the operator as manifests/overlays/kind-e2e deploys it, under the RBAC it
# ships, against an emulator that authorizes like an RBAC cluster (tests/integration/e2e.rs).
# This check shows that the RBAC is really in force: with one grant removed from a copy of
# manifests/ (`patch` of StatefulSets, which every reconcile of a new Site needs), the suite's
# lifecycle test must fail, and with the API server's 403 for exactly that grant.
set -euo pipefail
cd "$(dirname "$0")/.."

copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
cp -r manifests "$copy/"
python3 - "$copy/manifests/base/rbac.yaml" <<'PY'
import re, sys
path = sys.argv[1]
text = open(path).read()
rule = re.compile(r'(resources: \["statefulsets"\]\n\s*verbs: \[[^\]]*?)"patch", ?|(resources: \["statefulsets"\]\n\s*verbs: \[[^\]]*?), "patch"')
mutated, count = rule.subn(lambda m: m.group(1) or m.group(2), text)
if count != 1:
    sys.exit(f"{path}: no single StatefulSet rule granting patch to remove ({count} found)")
open(path, "w").write(mutated)
PY
if diff -q manifests/base/rbac.yaml "$copy/manifests/base/rbac.yaml" >/dev/null; then
  echo "rbac-mutation-check: the copy was not changed" >&2
  exit 1
fi

expected='User "system:serviceaccount:sites:sites-operator" cannot patch resource "statefulsets" in API group "apps" in the namespace "sites"'
log="$copy/e2e.log"
run_test() {
  if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --locked -p sites-operator --test integration -E 'test(=e2e::the_life_of_a_site)'
  else
    cargo test --locked -p sites-operator --test integration e2e::the_life_of_a_site -- --exact
  fi
}
if SITES_E2E_MANIFESTS="$copy/manifests" run_test >"$log" 2>&1; then
  cat "$log"
  echo "rbac-mutation-check: the e2e lifecycle passed without the StatefulSet patch grant" >&2
  exit 1
fi
# The operator logs JSON: its quotes arrive escaped.
if ! tr -d '\\' <"$log" | grep -qF "$expected"; then
  cat "$log"
  echo "rbac-mutation-check: the e2e lifecycle failed, but not with the 403 of the removed grant" >&2
  exit 1
fi
echo "rbac-mutation-check: without the StatefulSet patch grant, e2e::the_life_of_a_site fails with:"
tr -d '\\' <"$log" | grep -F "$expected" | head -1 | cut -c1-400
