#!/usr/bin/env bash
# Local playground: the Kubernetes API emulator, sites-operator (self-signed webhooks) and a few
# example Sites, on a machine without a cluster. Ctrl-C stops everything.
#
#   make run                     # ingress mode
#   MODE=gateway make run        # gateway mode (HTTPRoutes)
#
# Environment: MODE (ingress|gateway), PLAYGROUND_DIR (.playground), WEBHOOK_PORT, METRICS_PORT and
# HEALTH_PORT (default 0: free ports picked by the operator, which reports them; metrics are plain
# HTTP and open here, --metrics-insecure), PROFILE (debug|release,
# default debug), PLAYGROUND_BIN (a directory with prebuilt sites-operator and sites-emulator
# binaries: skips the build).
set -euo pipefail

MODE=${MODE:-ingress}
DIR=${PLAYGROUND_DIR:-.playground}
WEBHOOK_PORT=${WEBHOOK_PORT:-0}
METRICS_PORT=${METRICS_PORT:-0}
HEALTH_PORT=${HEALTH_PORT:-0}
PROFILE=${PROFILE:-debug}
NS=sites

case "$MODE" in
  ingress|gateway) ;;
  *) echo "error: MODE must be ingress or gateway, not '$MODE'" >&2; exit 2 ;;
esac

cd "$(dirname "$0")/.."
if [ -n "${PLAYGROUND_BIN:-}" ]; then
  # Prebuilt binaries (the tests use this).
  BIN=$PLAYGROUND_BIN
else
  release_flag=""
  [ "$PROFILE" = release ] && release_flag="--release"
  echo "building sites-operator and sites-emulator ($PROFILE)..."
  cargo build --locked --quiet $release_flag -p sites-operator -p sites-emulator
  BIN=target/$PROFILE
fi

rm -rf "$DIR"
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
KUBECONFIG_FILE=$DIR/kubeconfig
export KUBECONFIG=$KUBECONFIG_FILE
k() { kubectl --cache-dir "$DIR/kubectl-cache" "$@"; }

pids=()
cleanup() {
  trap - EXIT INT TERM
  echo
  echo "stopping..."
  # The operator first (it drains and releases its Lease), then the emulator.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill -TERM "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
  echo "stopped (logs in $DIR/)"
}
trap cleanup EXIT INT TERM

# The emulator picks its own port and writes it into the kubeconfig.
"$BIN/sites-emulator" --tls --kubeconfig "$KUBECONFIG_FILE" >"$DIR/emulator.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  [ -s "$KUBECONFIG_FILE" ] && k get --raw /version >/dev/null 2>&1 && break
  sleep 0.1
done
k get --raw /version >/dev/null || { echo "error: the emulator did not start (see $DIR/emulator.log)" >&2; exit 1; }

# What an installation provides: CRDs, namespace, storage class, PriorityClasses, session key,
# configuration, webhook configurations.
if [ "$MODE" = gateway ]; then
  "$BIN/sites-operator" crd --with-gateway-api | k apply -f - >/dev/null
else
  "$BIN/sites-operator" crd | k apply -f - >/dev/null
fi
k create namespace "$NS" >/dev/null
k apply -f manifests/dev/storageclass-sites-retain.yaml >/dev/null
k apply -f manifests/base/priorityclasses.yaml >/dev/null
k create secret generic sites-session -n "$NS" --from-literal=secret_key="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" >/dev/null
sed "s/^  mode: ingress /  mode: $MODE /" manifests/base/config.yaml >"$DIR/config.yaml"
k create configmap sites-config -n "$NS" --from-file=config.yaml="$DIR/config.yaml" >/dev/null
k apply -f manifests/base/webhooks.yaml >/dev/null

# The operator binds first and then reports the addresses it got (port 0: any free port), so no
# port is chosen here that another process could take in the meantime.
LISTENING=$DIR/operator.listening
"$BIN/sites-operator" run --self-signed --namespace "$NS" \
  --webhook-addr "127.0.0.1:$WEBHOOK_PORT" --metrics-addr "127.0.0.1:$METRICS_PORT" \
  --metrics-insecure --health-addr "127.0.0.1:$HEALTH_PORT" \
  --listen-report "$LISTENING" --cert-dir "$DIR/certs" >"$DIR/operator.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do
  [ -s "$LISTENING" ] && break
  kill -0 "${pids[-1]}" 2>/dev/null || break
  sleep 0.1
done
read -r webhook_field metrics_field health_field <"$LISTENING" 2>/dev/null || { echo "error: the operator did not start listening (see $DIR/operator.log)" >&2; exit 1; }
WEBHOOK_ADDR=${webhook_field#webhook=}
METRICS_ADDR=${metrics_field#metrics=}
HEALTH_ADDR=${health_field#health=}
# The webhook configurations name the Service; the emulator sends its calls to the operator.
printf '%s' "$WEBHOOK_ADDR" | k create --raw "/__emulator/services/$NS/sites-operator-webhook/443" -f - >/dev/null
for _ in $(seq 1 300); do
  curl -fs "http://$HEALTH_ADDR/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fs "http://$HEALTH_ADDR/readyz" >/dev/null || { echo "error: the operator did not become ready (see $DIR/operator.log)" >&2; exit 1; }

for f in site.yaml site-custom-app.yaml site-archived.yaml; do
  k apply -n "$NS" -f "manifests/examples/$f" >/dev/null
done
k wait --for=condition=Available site/docs-handbook -n "$NS" --timeout=60s >/dev/null || true

cat <<EOT

sites-operator playground ($MODE mode) is running.

  export KUBECONFIG=$KUBECONFIG_FILE

  kubectl get sites -n $NS
  kubectl wait --for=condition=Available site/research-dashboard -n $NS
  kubectl get statefulsets,services,ingresses,pods -n $NS
  kubectl apply -n $NS -f manifests/examples/invalid/port.yaml        # refused by the webhook
  kubectl annotate site docs-handbook -n $NS --overwrite sites.ecmwf.int/upgrade-request=force
  kubectl patch site docs-handbook -n $NS --type=merge -p '{"spec":{"configuration":{"enabled":false}}}'
  kubectl describe site docs-handbook -n $NS
  kubectl edit configmap sites-config -n $NS      # a valid change is in force at once
  curl -s http://$METRICS_ADDR/metrics | grep -E '^(workqueue|controller_runtime|sites_)'
  curl -s http://$HEALTH_ADDR/readyz

Logs: $DIR/operator.log, $DIR/emulator.log. Ctrl-C stops everything.
EOT

wait -n "${pids[@]}" || true
