#!/usr/bin/env bash
# A real Kubernetes control plane on loopback, as envtest gives kubebuilder projects: etcd,
# kube-apiserver and kube-controller-manager of Kubernetes $KUBE_VERSION, built once from
# Debian's source package into a cache outside the checkout, or prebuilt ones from KUBE_ASSETS.
#
#   scripts/control-plane.sh install          # apt-get what it needs, build into the cache (once)
#   scripts/control-plane.sh start DIR        # start on free loopback ports; DIR/kubeconfig
#   scripts/control-plane.sh stop DIR         # stop exactly what `start DIR` started
#   scripts/control-plane.sh kill DIR C       # SIGKILL component C (etcd, kube-apiserver or
#                                             #   kube-controller-manager), as a crash would
#   scripts/control-plane.sh restart DIR C    # start C again as it was started, wait until it serves
#   scripts/control-plane.sh assets           # print the directory holding the binaries
#
# `start` waits until the API server answers /readyz and the default ServiceAccount exists, and
# prints `export KUBECONFIG=DIR/kubeconfig`. The API server's audit log, DIR/audit.log, holds
# one JSON line (audit.k8s.io/v1 Event, level Metadata) per write request. Everything binds to
# 127.0.0.1. With `--watch-pid PID` the control plane stops by itself when that process ends
# (tests use it so that a killed test leaves nothing behind).
#
# Building needs Debian bookworm's apt: it installs etcd-server, openssl, curl, golang-1.19-go
# and golang-github-modern-go-reflect2-dev, and adds a deb-src entry for bookworm (copied from
# the machine's own bookworm entry) to fetch the `kubernetes` source package. Elsewhere, set
# KUBE_ASSETS to a directory holding prebuilt executables `etcd`, `kube-apiserver` and
# `kube-controller-manager` (Kubernetes v$KUBE_VERSION, etcd 3.4.23 or later): then nothing is
# built or installed, `install` only checks them and `start` runs them. Either way start needs
# openssl, curl, python3 and kubectl on PATH.
#
# Environment: KUBE_ASSETS (an absolute path; unset: build), KUBE_ASSETS_CACHE (default
# ${XDG_CACHE_HOME:-~/.cache}/sites-operator), KUBE_VERSION (default 1.20.2), APT_ETC (where
# the machine's apt sources are read from, default /etc/apt), KUBE_CM_QPS and KUBE_CM_BURST
# (the controller manager's --kube-api-qps and --kube-api-burst, default 20 and 30, its own
# defaults: its client's pace bounds how fast the pods of many new Sites are created),
# KUBE_CM_CONTROLLERS (its --controllers, default: every controller but those of nodes, cloud
# routes and volume attachment, which this control plane has no use for).
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-1.20.2}
# The controller manager's client rate limit (its own defaults: 20 requests/s, bursts of 30).
KUBE_CM_QPS=${KUBE_CM_QPS:-20}
KUBE_CM_BURST=${KUBE_CM_BURST:-30}
KUBE_CM_CONTROLLERS=${KUBE_CM_CONTROLLERS:-'*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle,-service,-route,-ttl,-bootstrapsigner,-tokencleaner,-attachdetach,-persistentvolume-expander'}
DEBIAN_VERSION=1.20.5+really${KUBE_VERSION}
CACHE=${KUBE_ASSETS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sites-operator}
KUBE_ASSETS=${KUBE_ASSETS:-}
ASSETS=${KUBE_ASSETS:-$CACHE/kubernetes-$KUBE_VERSION}
# Debian's etcd-server puts etcd on PATH; prebuilt assets bring their own.
ETCD=${KUBE_ASSETS:+$KUBE_ASSETS/etcd}
ETCD=${ETCD:-etcd}
APT_ETC=${APT_ETC:-/etc/apt}
GO=/usr/lib/go-1.19/bin/go
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)

log() { echo "control-plane: $*" >&2; }
die() { log "$*"; exit 1; }

# Paths removed however the script exits (die and failed commands included): add to the list
# rather than setting another EXIT trap.
CLEANUP=()
cleanup() { [ ${#CLEANUP[@]} -eq 0 ] || rm -rf "${CLEANUP[@]}"; }
trap cleanup EXIT

need() { # COMMAND...: exit naming those not on PATH
  local missing=() c
  for c in "$@"; do command -v "$c" >/dev/null || missing+=("$c"); done
  [ ${#missing[@]} -eq 0 ] || die "not on PATH: ${missing[*]} (install them first)"
}

need_apt() { # WHY: exit with what to do instead when this is not Debian with apt
  if command -v apt-get >/dev/null && command -v apt-cache >/dev/null \
      && { [ -z "$SUDO" ] || command -v sudo >/dev/null; }; then
    return
  fi
  log "$1 needs apt-get and apt-cache${SUDO:+ and sudo}, which this machine does not have. Without KUBE_ASSETS"
  log "this script needs Debian bookworm: it apt-gets etcd-server, openssl, curl and Go 1.19 and builds"
  log "kube-apiserver and kube-controller-manager from bookworm's kubernetes source package (deb-src)."
  log "To bring your own binaries instead, set KUBE_ASSETS to an absolute directory holding the executables"
  log "etcd (3.4.23 or later), kube-apiserver and kube-controller-manager of Kubernetes v$KUBE_VERSION (as in"
  log "https://dl.k8s.io/release/v$KUBE_VERSION/bin/linux/amd64/), and install openssl, curl, python3 and kubectl."
  exit 1
}

check_assets() { # the prebuilt binaries KUBE_ASSETS names
  case $KUBE_ASSETS in /*) ;; *) die "KUBE_ASSETS=$KUBE_ASSETS must be an absolute path" ;; esac
  local b missing=()
  for b in etcd kube-apiserver kube-controller-manager; do
    if [ ! -f "$KUBE_ASSETS/$b" ] || [ ! -x "$KUBE_ASSETS/$b" ]; then missing+=("$b"); fi
  done
  [ ${#missing[@]} -eq 0 ] \
    || die "KUBE_ASSETS=$KUBE_ASSETS must hold the executables etcd, kube-apiserver and kube-controller-manager; missing or not executable: ${missing[*]}"
  local version
  version=$("$KUBE_ASSETS/kube-apiserver" --version 2>&1) \
    || die "$KUBE_ASSETS/kube-apiserver --version failed: $version"
  [ "$version" = "Kubernetes v$KUBE_VERSION" ] \
    || die "$KUBE_ASSETS/kube-apiserver is '$version', not Kubernetes v$KUBE_VERSION (KUBE_VERSION sets the one expected)"
}

built() { [ -x "$ASSETS/kube-apiserver" ] && [ -x "$ASSETS/kube-controller-manager" ]; }

packages() { # [build]: also what building needs
  local missing=()
  command -v etcd >/dev/null || missing+=(etcd-server)
  command -v openssl >/dev/null || missing+=(openssl)
  command -v curl >/dev/null || missing+=(curl)
  if [ "${1:-}" = build ]; then
    [ -x "$GO" ] || missing+=(golang-1.19-go)
    [ -d /usr/share/gocode/src/github.com/modern-go/reflect2 ] || missing+=(golang-github-modern-go-reflect2-dev)
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    need_apt "installing ${missing[*]}"
    log "installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# The machine's own bookworm entry (one-line in sources.list and sources.list.d/*.list, deb822
# in sources.list.d/*.sources; the first `deb` entry of suite bookworm with component main, in
# apt's order) as a deb-src stanza with its URIs, Suites and Signed-By; fails when there is none.
bookworm_deb_src() {
  local f
  for f in "$APT_ETC/sources.list" "$APT_ETC"/sources.list.d/*; do
    [ -f "$f" ] || continue
    case $f in
      *.list) awk '
        { sub(/#.*/, "") }
        $1 == "deb" {
          opts = ""
          if (match($0, /^[ \t]*deb[ \t]+\[[^]]*\]/)) {
            opts = substr($0, RSTART, RLENGTH); $0 = "deb " substr($0, RSTART + RLENGTH)
          }
          if ($3 != "bookworm" || $2 ~ /^cdrom:/ || (" " $0 " ") !~ /[ \t]main[ \t]/) next
          print "Types: deb-src"; print "URIs: " $2; print "Suites: " $3; print "Components: main"
          if (match(opts, /signed-by=[^] \t]+/)) print "Signed-By: " substr(opts, RSTART + 10, RLENGTH - 10)
          found = 1; exit
        }
        END { exit !found }' "$f" ;;
      *.sources) awk '
        BEGIN { RS = "" }
        {
          n = split($0, line, "\n"); split("", f); key = ""
          for (i = 1; i <= n; i++) {
            if (line[i] ~ /^#/) continue
            if (line[i] ~ /^[ \t]/) { if (key != "") f[key] = f[key] "\n" line[i]; continue }
            c = index(line[i], ":"); if (!c) continue
            key = tolower(substr(line[i], 1, c - 1)); v = substr(line[i], c + 1)
            sub(/^[ \t]+/, "", v); sub(/[ \t]+$/, "", v); f[key] = v
          }
          types = " " f["types"] " "; suites = " " f["suites"] " "; components = " " f["components"] " "
          gsub(/[ \t]+/, " ", types); gsub(/[ \t]+/, " ", suites); gsub(/[ \t]+/, " ", components)
          if (types !~ / deb / || suites !~ / bookworm / || components !~ / main / \
              || tolower(f["enabled"]) == "no" || f["uris"] ~ /^cdrom:/) next
          print "Types: deb-src"; print "URIs: " f["uris"]; print "Suites: " f["suites"]; print "Components: main"
          if (f["signed-by"] != "") print "Signed-By: " f["signed-by"]
          found = 1; exit
        }
        END { exit !found }' "$f" ;;
      *) continue ;;
    esac || continue
    log "deb-src entry copied from the bookworm entry of $f"
    return
  done
  return 1
}

# Debian's `kubernetes` source package is upstream's tree with vendor/; apt-get source needs a
# deb-src entry for bookworm.
fetch_source() {
  local work=$1
  if ! apt-cache showsrc kubernetes 2>/dev/null | grep -q "^Version: $DEBIAN_VERSION"; then
    log "adding a deb-src entry for bookworm"
    local entry
    entry=$(bookworm_deb_src) || {
      log "no bookworm entry in $APT_ETC/sources.list or $APT_ETC/sources.list.d: using http://deb.debian.org/debian"
      entry=$(printf '%s\n' 'Types: deb-src' 'URIs: http://deb.debian.org/debian' 'Suites: bookworm' \
        'Components: main' 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg')
    }
    echo "$entry" | $SUDO tee /etc/apt/sources.list.d/sites-operator-kubernetes-src.sources >/dev/null
    $SUDO apt-get update -qq
  fi
  local out=$work/apt-get-source.log
  (cd "$work" && { apt-get source --download-only -qq "kubernetes=$DEBIAN_VERSION-1.1+deb12u1" \
    || apt-get source --download-only -qq kubernetes; }) >"$out" 2>&1 \
    || { tail -20 "$out" >&2; die "apt-get source kubernetes failed (its output is above)"; }
  local orig=("$work"/kubernetes_*.orig.tar.gz)
  [ -f "${orig[0]}" ] || { tail -20 "$out" >&2; die "apt-get source kubernetes brought no orig tarball"; }
  tar -C "$work" -xzf "${orig[0]}"
}

install() {
  if [ -n "$KUBE_ASSETS" ]; then
    check_assets
    need openssl curl python3 kubectl
    log "using the prebuilt binaries in $KUBE_ASSETS: nothing to build"
    return
  fi
  # What start needs and nothing here installs, checked before a build of several minutes.
  need python3 kubectl
  if ! built; then
    need_apt "building Kubernetes $KUBE_VERSION"
    need tar gzip find xargs awk sed grep sort paste cut dirname mktemp
  fi
  packages
  built && return
  packages build
  mkdir -p "$CACHE"
  local work
  work=$(mktemp -d "$CACHE/build.XXXXXX")
  CLEANUP+=("$work" "$ASSETS.tmp")
  log "building Kubernetes $KUBE_VERSION in $work (a few minutes)"
  fetch_source "$work"
  local tree=$work/kubernetes-$KUBE_VERSION
  [ -d "$tree" ] || die "no $tree after unpacking the source"
  # The vendored reflect2 1.0.1 corrupts memory under Go >= 1.18: Debian's 1.0.2 replaces it.
  rm -rf "$tree/vendor/github.com/modern-go/reflect2"
  cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 "$tree/vendor/github.com/modern-go/reflect2"
  # Kubernetes 1.20 builds in GOPATH mode (hack/lib/golang.sh): the staging repositories are
  # vendor/k8s.io/* symlinks, so no module metadata is needed.
  local gopath=$work/gopath
  mkdir -p "$gopath/src/k8s.io"
  ln -s "$tree" "$gopath/src/k8s.io/kubernetes"
  # The Go build cache goes with the build directory: only the binaries are kept.
  export GOPATH=$gopath GO111MODULE=off GOCACHE=$work/go-build GOFLAGS='' CGO_ENABLED=0
  local src=$gopath/src/k8s.io/kubernetes
  # pkg/generated/openapi is generated at build time upstream (build/root/Makefile.generated_files):
  # the packages tagged +k8s:openapi-gen, staging named as vendor/, less the code-generator
  # and sample-apiserver examples.
  (cd "$src" && "$GO" build -o "$work/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen)
  local inputs
  inputs=$(cd "$src" && find -H . \( -path ./vendor -o -path './_*' -o -path './.*' \) -prune -o -name '*.go' -type f -print0 \
    | xargs -0 grep -l '^// *+k8s:openapi-gen=' \
    | sed 's|^\./staging/src|vendor|; s|^\./||' | xargs -n1 dirname | LC_ALL=C sort -u \
    | grep -v -e '^vendor/k8s.io/code-generator/' -e '^vendor/k8s.io/sample-apiserver/' \
    | sed 's|^|k8s.io/kubernetes/|' | paste -sd, -)
  (cd "$src" && "$work/openapi-gen" --logtostderr -i "$inputs" -p k8s.io/kubernetes/pkg/generated/openapi \
    -O zz_generated.openapi -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
    -r "$work/openapi-violations.report" >"$work/openapi-gen.log" 2>&1) \
    || { tail -20 "$work/openapi-gen.log" >&2; die "openapi-gen failed (its output is above)"; }
  local ldflags="-s -w" minor
  minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
  for kv in gitVersion=v$KUBE_VERSION gitMajor=1 gitMinor=$minor gitTreeState=clean \
            gitCommit=faecb196815e248d3ecfb03c680a4507229c2a56 buildDate=2021-01-13T13:20:00Z; do
    ldflags+=" -X k8s.io/kubernetes/vendor/k8s.io/component-base/version.$kv"
    ldflags+=" -X k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version.$kv"
  done
  mkdir -p "$work/bin"
  for cmd in kube-apiserver kube-controller-manager; do
    log "go build $cmd"
    (cd "$src" && "$GO" build -trimpath -ldflags "$ldflags" -o "$work/bin/$cmd" "./cmd/$cmd")
  done
  mkdir -p "$ASSETS.tmp"
  mv "$work/bin/"* "$ASSETS.tmp/"
  rm -rf "$ASSETS" && mv "$ASSETS.tmp" "$ASSETS"
  log "built into $ASSETS"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

certs() {
  local dir=$1
  (
    cd "$dir"
    : > openssl.log
    ssl() { openssl "$@" >>openssl.log 2>&1 || { tail -20 openssl.log >&2; die "openssl $1 failed (its output is above)"; }; }
    ssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=kubernetes-ca -keyout ca.key -out ca.crt
    ssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver -keyout apiserver.key -out apiserver.csr
    printf 'subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\n' > san.ext
    ssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile san.ext -out apiserver.crt
    ssl genrsa -out sa.key 2048
    ssl rsa -in sa.key -pubout -out sa.pub
    rm -f apiserver.csr san.ext ca.srl openssl.log
  )
}

wait_for() { # DEADLINE-SECONDS PID COMMAND...: until COMMAND succeeds, PID lives, the deadline
  local deadline=$(( $(date +%s) + $1 )) pid=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.2
  done
}

owns_port() { # PID PORT: whether process PID listens on 127.0.0.1:PORT (Linux: /proc)
  python3 - "$1" "$2" <<'PY'
import os, sys
pid, port = sys.argv[1], int(sys.argv[2])
listening = set()
with open("/proc/net/tcp") as table:
    for line in list(table)[1:]:
        f = line.split()
        address, state, inode = f[1], f[3], f[9]
        if state == "0A" and address == "0100007F:%04X" % port:
            listening.add("socket:[%s]" % inode)
try:
    fds = os.listdir("/proc/%s/fd" % pid)
except OSError:
    sys.exit(1)
for fd in fds:
    try:
        if os.readlink("/proc/%s/fd/%s" % (pid, fd)) in listening:
            sys.exit(0)
    except OSError:
        pass
sys.exit(1)
PY
}

port_taken() { # DIR LOG...: whether a process of the control plane lost its port
  local dir=$1; shift
  for f in "$@"; do grep -qi 'address already in use' "$dir/$f" 2>/dev/null && return 0; done
  return 1
}

# Starts component NAME of DIR in the background, appending to DIR/NAME.log; keeps its command
# line in DIR/NAME.cmd (for `restart`) and its pid in DIR/pids; sets STARTED_PID.
component() { # DIR NAME COMMAND...
  local dir=$1 name=$2; shift 2
  printf '%q ' "$@" > "$dir/$name.cmd"
  "$@" >>"$dir/$name.log" 2>&1 &
  STARTED_PID=$!
  if grep -q "^$name " "$dir/pids" 2>/dev/null; then
    awk -v n="$name" -v p="$STARTED_PID" '$1 == n { $2 = p } { print }' "$dir/pids" > "$dir/pids.new"
    mv "$dir/pids.new" "$dir/pids"
  else
    echo "$name $STARTED_PID" >> "$dir/pids"
  fi
}

# Whether component NAME (pid PID) of DIR serves: etcd owns its client port, the API server
# answers /readyz, the controller manager /healthz.
serves() { # DIR NAME PID
  local dir=$1 name=$2 pid=$3 etcd_port api_port cm_port
  read -r etcd_port api_port cm_port < "$dir/ports"
  case $name in
    etcd) owns_port "$pid" "$etcd_port" ;;
    kube-apiserver) curl -sf --cacert "$dir/ca.crt" -H "Authorization: Bearer $(cut -d, -f1 "$dir/tokens.csv")" \
      "https://127.0.0.1:$api_port/readyz" ;;
    kube-controller-manager) curl -sfk "https://127.0.0.1:$cm_port/healthz" ;;
    *) return 1 ;;
  esac
}

# Starts etcd, the API server and the controller manager on free ports and waits until they
# serve; 2 when one of them could not bind its port, 1 on another failure.
launch() {
  local dir=$1 token=$2
  local etcd_port etcd_peer api_port cm_port
  etcd_port=$(free_port); etcd_peer=$(free_port); api_port=$(free_port); cm_port=$(free_port)
  echo "$etcd_port $api_port $cm_port" > "$dir/ports"
  : > "$dir/pids"
  rm -f "$dir/etcd.log" "$dir/kube-apiserver.log" "$dir/kube-controller-manager.log"
  component "$dir" etcd "$ETCD" --name control-plane --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "control-plane=http://127.0.0.1:$etcd_peer" \
    --unsafe-no-fsync --quota-backend-bytes 4294967296 --log-level warn
  local etcd_pid=$STARTED_PID
  # The port answers for this etcd, not for another one started meanwhile on a port it took.
  if ! wait_for 30 "$etcd_pid" serves "$dir" etcd "$etcd_pid"; then
    port_taken "$dir" etcd.log && return 2
    tail -20 "$dir/etcd.log" >&2
    log "etcd did not start"
    return 1
  fi
  component "$dir" kube-apiserver "$ASSETS/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --cert-dir "$dir" --tls-cert-file "$dir/apiserver.crt" --tls-private-key-file "$dir/apiserver.key" \
    --client-ca-file "$dir/ca.crt" --token-auth-file "$dir/tokens.csv" \
    --authorization-mode RBAC --allow-privileged \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$dir/sa.pub" \
    --service-account-signing-key-file "$dir/sa.key" --api-audiences https://kubernetes.default.svc \
    --service-cluster-ip-range 10.0.0.0/16 \
    --audit-policy-file "$dir/audit-policy.yaml" --audit-log-path "$dir/audit.log" \
    --audit-log-maxsize 1048576
  local api_pid=$STARTED_PID
  cat > "$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: control-plane
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority: $dir/ca.crt
users:
- name: admin
  user:
    token: $token
contexts:
- name: control-plane
  context: {cluster: control-plane, user: admin, namespace: default}
current-context: control-plane
EOF
  if ! wait_for 60 "$api_pid" serves "$dir" kube-apiserver "$api_pid"; then
    port_taken "$dir" etcd.log kube-apiserver.log && return 2
    tail -20 "$dir/kube-apiserver.log" >&2
    log "the API server did not become ready"
    return 1
  fi
  component "$dir" kube-controller-manager "$ASSETS/kube-controller-manager" \
    --kubeconfig "$dir/kubeconfig" --authentication-kubeconfig "$dir/kubeconfig" \
    --authorization-kubeconfig "$dir/kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$cm_port" --port 0 \
    --leader-elect=false --use-service-account-credentials \
    --service-account-private-key-file "$dir/sa.key" --root-ca-file "$dir/ca.crt" \
    --cluster-signing-cert-file "$dir/ca.crt" --cluster-signing-key-file "$dir/ca.key" \
    --kube-api-qps "$KUBE_CM_QPS" --kube-api-burst "$KUBE_CM_BURST" \
    --controllers "$KUBE_CM_CONTROLLERS"
  local cm_pid=$STARTED_PID
  # The ServiceAccount controller creates `default` in each namespace: the first sign the
  # controller manager runs (pods cannot be created before it).
  if ! wait_for 60 "$cm_pid" env KUBECONFIG="$dir/kubeconfig" kubectl get serviceaccount default -n default; then
    port_taken "$dir" kube-controller-manager.log && return 2
    tail -20 "$dir/kube-controller-manager.log" >&2
    log "the controller manager did not start"
    return 1
  fi
}

pid_of() { # DIR NAME
  awk -v n="$2" '$1 == n { print $2 }' "$1/pids" 2>/dev/null
}

# SIGKILLs component NAME of DIR (as a crash or the OOM killer would) and waits until it is gone.
kill_component() { # DIR NAME
  local dir=$1 name=$2 pid
  pid=$(pid_of "$dir" "$name")
  [ -n "$pid" ] || die "no $name in $dir/pids"
  kill -9 "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.05; done
  die "$name (pid $pid) did not die"
}

# Starts component NAME of DIR again with the command line it was started with (same ports,
# same data) and waits until it serves.
restart() { # DIR NAME
  local dir=$1 name=$2 pid
  [ -f "$dir/$name.cmd" ] || die "no $name was started in $dir"
  pid=$(pid_of "$dir" "$name")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then die "$name runs (pid $pid): kill it first"; fi
  local line
  line=$(cat "$dir/$name.cmd")
  eval "set -- $line"
  component "$dir" "$name" "$@"
  wait_for 60 "$STARTED_PID" serves "$dir" "$name" "$STARTED_PID" \
    || { tail -20 "$dir/$name.log" >&2; die "$name did not serve again"; }
}

start() {
  local dir=$1 watch_pid=${2:-}
  need python3 kubectl awk tac
  if [ -n "$KUBE_ASSETS" ]; then
    check_assets
    need openssl curl
  else
    packages
    built || die "Kubernetes $KUBE_VERSION is not built in $ASSETS: run '$0 install' (make control-plane), or set KUBE_ASSETS to prebuilt binaries"
  fi
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [ ! -s "$dir/pids" ] || die "$dir/pids exists: stop that control plane first"
  certs "$dir"
  local token
  token=$(openssl rand -hex 24)
  echo "$token,admin,admin,system:masters" > "$dir/tokens.csv"
  # The audit log, an instrument the operator does not control: one line per write request, at
  # its end (the log backend's default mode, blocking, writes it before the handler returns).
  # Reads are not logged: a 10,000-Site run would log gigabytes of watches and lists. It is never
  # rotated (--audit-log-maxsize 0 would rotate at 100 MB, a 10,000-Site creation's size): the
  # readers count from one file.
  cat > "$dir/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  verbs: [get, list, watch]
- level: Metadata
EOF
  # Ports are picked free and then bound by another process, so another process may take one
  # in between (control planes started in parallel): a start whose bind failed is tried again
  # on new ports.
  local attempt
  for attempt in 1 2 3; do
    local status=0
    launch "$dir" "$token" || status=$?
    [ "$status" = 0 ] && break
    stop "$dir"
    if [ "$status" != 2 ] || [ "$attempt" = 3 ]; then
      die "the control plane did not start (logs in $dir)"
    fi
    log "a port was taken meanwhile: starting again on other ports"
    rm -rf "$dir/etcd"
  done
  if [ -n "$watch_pid" ]; then
    # It keeps the last pids it read (a restarted component has a new one): the directory may
    # be gone by the time the watched process is.
    local started
    started=$(awk '{print $2}' "$dir/pids" | tr '\n' ' ')
    # shellcheck disable=SC2086 # $started is a list of pids
    ( trap '' HUP
      while kill -0 "$watch_pid" 2>/dev/null; do
        sleep 1
        [ ! -f "$dir/pids" ] || started=$(awk '$1 != "watchdog" {print $2}' "$dir/pids" 2>/dev/null | tr '\n' ' ')
      done
      kill $started 2>/dev/null; sleep 5; kill -9 $started 2>/dev/null || true
      rm -f "$dir/pids" ) </dev/null >/dev/null 2>&1 &
    echo "watchdog $!" >> "$dir/pids"
  fi
  echo "export KUBECONFIG=$dir/kubeconfig"
}

stop() {
  local dir=$1
  [ -f "$dir/pids" ] || return 0
  local pids=()
  while read -r name pid; do
    [ "$name" = watchdog ] && [ "$pid" = "$PPID" ] && continue
    pids+=("$pid")
  done < <(tac "$dir/pids")
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for _ in $(seq 50); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  rm -f "$dir/pids"
}

cmd=${1:-}
case "$cmd" in
  install) install ;;
  assets) echo "$ASSETS" ;;
  start)
    [ $# -ge 2 ] || die "usage: $0 start DIR [--watch-pid PID]"
    dir=$2; watch=
    [ "${3:-}" = --watch-pid ] && watch=${4:?--watch-pid needs a pid}
    start "$dir" "$watch" ;;
  stop) [ $# -ge 2 ] || die "usage: $0 stop DIR"; stop "$2" ;;
  kill) [ $# -ge 3 ] || die "usage: $0 kill DIR COMPONENT"; kill_component "$2" "$3" ;;
  restart) [ $# -ge 3 ] || die "usage: $0 restart DIR COMPONENT"; restart "$2" "$3" ;;
  *) die "usage: $0 install | start DIR [--watch-pid PID] | stop DIR | kill DIR COMPONENT | restart DIR COMPONENT | assets" ;;
esac
