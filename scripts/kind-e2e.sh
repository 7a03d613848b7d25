#!/usr/bin/env bash
# Deploys sites-operator (manifests/overlays/kind-e2e) into the cluster KUBECONFIG points at and
# runs the black-box e2e suite against it. Called by `make kind-e2e` after the image is loaded.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${KUBECONFIG:?KUBECONFIG must point at the cluster}"

kubectl apply -f manifests/dev/storageclass-sites-retain.yaml
kubectl apply -k manifests/overlays/kind-e2e
kubectl get secret sites-session -n sites >/dev/null 2>&1 \
  || kubectl create secret generic sites-session -n sites \
       --from-literal=secret_key="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
kubectl rollout status deployment/sites-operator -n sites --timeout=180s

SITES_E2E_KUBECONFIG=$KUBECONFIG cargo nextest run --locked -p sites-operator --test integration e2e::
