# sites-operator: build, test and lint entry points. `make test` is the one command that checks
# everything; CI (.ci/run) calls exactly that.

CARGO ?= cargo
PYTHON ?= python3
# Every build of the test run compiles the same dependency graph (the workspace with its dev
# dependencies: cargo unifies features over the packages and targets it is asked for, so `cargo run`
# of one package would build the whole graph a second time).
BUILD := $(CARGO) build --locked --workspace --all-targets
OPERATOR := $(or $(CARGO_TARGET_DIR),target)/debug/sites-operator
TOOLS := .tools
VENV := $(TOOLS)/venv
KUBERNETES_VALIDATE_VERSION := 1.37.0
# Kubernetes version the manifests are validated against (the emulator's and kubectl's).
KUBERNETES_VERSION := 1.32.0

.PHONY: lock-check control-plane real-apiserver-test merge-table merge-table-check rbac-mutation-check bench bench-ab bench-hostile bench-full prometheus-tools all build run test lint fmt fmt-check clippy unit crd crd-check validate-manifests promtool-test kind-e2e-check image kind-e2e fuzz tools clean

all: build

## build: compile the operator (debug).
build:
	$(CARGO) build --locked

## run: the local playground: emulator + operator + example Sites (MODE=gateway for HTTPRoutes).
run:
	MODE=$(MODE) scripts/playground.sh

## test: formatting, lints, every test, CRD drift, manifest validation, kind-e2e dry run, and
## the bounded fuzzing run.
test: lock-check fmt-check clippy unit real-apiserver-test rbac-mutation-check crd-check merge-table-check validate-manifests promtool-test kind-e2e-check fuzz

## lock-check: both lock files (the workspace's and the fuzz crate's) match their manifests;
## checked first so a stale lock fails in seconds, not after the tests.
lock-check:
	$(CARGO) tree --locked --depth 0 >/dev/null
	$(CARGO) tree --locked --depth 0 --manifest-path fuzz/Cargo.toml >/dev/null

## lint: formatting and clippy with warnings as errors.
lint: fmt-check clippy

# The fuzz crate is outside the workspace (it builds with its own lock file): formatted too.
fmt:
	$(CARGO) fmt --all
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml

fmt-check:
	$(CARGO) fmt --all -- --check
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml -- --check

clippy:
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings

## unit: all Rust tests (cargo-nextest when installed, else cargo test).
unit: prometheus-tools
	$(BUILD)
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
		$(CARGO) nextest run --locked --workspace --no-fail-fast; \
	else \
		$(CARGO) test --locked --workspace --no-fail-fast; \
	fi

## control-plane: a real Kubernetes 1.20.2 control plane (etcd, kube-apiserver,
## kube-controller-manager), built once from Debian's source package into
## ~/.cache/sites-operator (KUBE_ASSETS_CACHE), or prebuilt binaries in KUBE_ASSETS (only
## checked then); `scripts/control-plane.sh start DIR` runs one.
control-plane:
	scripts/control-plane.sh install

## real-apiserver-test: the tests named real_apiserver (ignored in `unit`), each against a
## control plane of its own with the emulator's kubelet as its node; fails first when the tests
## found are not exactly those tests/real-apiserver-tests.txt lists (a lost #[ignore], a rename).
real-apiserver-test: control-plane
	$(BUILD)
	CARGO=$(CARGO) scripts/real-apiserver-tests.sh

## rbac-mutation-check: the e2e suite runs the operator as manifests/overlays/kind-e2e deploys
## it, under its RBAC; with one grant removed from a copy of manifests/, its lifecycle test must
## fail with the API server's 403 for that grant (scripts/rbac-mutation-check.sh).
rbac-mutation-check:
	scripts/rbac-mutation-check.sh

## merge-table: regenerate the emulator's merge-semantics table (tests/emulator/src/merge_table.txt)
## from the Kubernetes $(KUBERNETES_VERSION) schemas kubernetes-validate publishes.
MERGE_TABLE := tests/emulator/src/merge_table.txt
KUBERNETES_VALIDATE_DIR = $$($(VENV)/bin/python -c 'import kubernetes_validate, os; print(os.path.dirname(kubernetes_validate.__file__))')
merge-table: $(VENV)/bin/kubernetes-validate
	$(VENV)/bin/python tests/emulator/merge/generate.py "$(KUBERNETES_VALIDATE_DIR)" $(KUBERNETES_VERSION) > $(MERGE_TABLE)

## merge-table-check: fail when the committed merge-semantics table differs from a regenerated one.
merge-table-check: $(VENV)/bin/kubernetes-validate
	@$(VENV)/bin/python tests/emulator/merge/generate.py "$(KUBERNETES_VALIDATE_DIR)" $(KUBERNETES_VERSION) \
		| diff -u $(MERGE_TABLE) - \
		|| { echo "$(MERGE_TABLE) is out of date: run 'make merge-table'"; exit 1; }
	@echo "merge table matches the Kubernetes $(KUBERNETES_VERSION) schemas: $$(grep -c '^kind' $(MERGE_TABLE)) kinds"

## crd: regenerate manifests/base/crd.yaml from the Rust types.
crd:
	$(BUILD) --quiet
	$(OPERATOR) crd > manifests/base/crd.yaml

## crd-check: fail when manifests/base/crd.yaml differs from the generated CRD.
crd-check:
	@$(BUILD) --quiet
	@$(OPERATOR) crd | diff -u manifests/base/crd.yaml - \
		|| { echo "manifests/base/crd.yaml is out of date: run 'make crd'"; exit 1; }

## validate-manifests: validate the manifests against the Kubernetes API schemas.
# The kustomize base and overlays are rendered with `kubectl kustomize` and validated whole.
# kubernetes-validate has no schemas for CRD kinds; the ones below are skipped by name (their
# objects still render; the PrometheusRule's rules are checked by promtool-test). Any other kind
# without a schema fails the check.
SCHEMALESS_KINDS := Certificate|Issuer|ServiceMonitor|PrometheusRule
OVERLAYS := base overlays/self-signed overlays/cert-manager overlays/kind-e2e overlays/monitoring overlays/local-1.20
validate-manifests: $(VENV)/bin/kubernetes-validate
	@mkdir -p $(TOOLS)/rendered
	@for k in $(OVERLAYS); do \
		kubectl kustomize manifests/$$k > $(TOOLS)/rendered/$$(echo $$k | tr / -).yaml || exit 1; \
	done
	@$(VENV)/bin/kubernetes-validate --strict --kubernetes-version $(KUBERNETES_VERSION) \
		manifests/dev/*.yaml $(TOOLS)/rendered/*.yaml > $(TOOLS)/validate.log 2>&1; \
		status=$$?; grep -v '^INFO' $(TOOLS)/validate.log; \
		[ $$status = 0 ] || exit $$status; \
		if grep "Couldn't find schema" $(TOOLS)/validate.log | grep -Ev "for kind ($(SCHEMALESS_KINDS)) with"; then \
			echo "kinds without a schema (add them to SCHEMALESS_KINDS only if they are CRD kinds)"; exit 1; \
		fi; \
		echo "manifests valid: $$(grep -c passed $(TOOLS)/validate.log) objects"

## promtool-test: the alerting rules of the monitoring overlay: `promtool check rules`, then
## `promtool test rules` (manifests/overlays/monitoring/tests/): an alert that does not fire, or
## fires where it should not, fails. Every alert must have a test.
MONITORING := manifests/overlays/monitoring
promtool-test: prometheus-tools $(VENV)/bin/kubernetes-validate
	@rm -rf $(TOOLS)/promtool && mkdir -p $(TOOLS)/promtool
	$(VENV)/bin/python -c 'import sys, yaml; yaml.safe_dump(yaml.safe_load(open(sys.argv[1]))["spec"], open(sys.argv[2], "w"))' \
		$(MONITORING)/prometheusrule.yaml $(TOOLS)/promtool/rules.yaml
	cp $(MONITORING)/tests/*.yaml $(TOOLS)/promtool/
	promtool check rules $(TOOLS)/promtool/rules.yaml
	@for alert in $$(sed -n 's/^ *- alert: *//p' $(MONITORING)/prometheusrule.yaml); do \
		grep -q "alertname: $$alert\$$" $(MONITORING)/tests/*.yaml \
			|| { echo "alert $$alert has no promtool test in $(MONITORING)/tests/"; exit 1; }; \
	done
	cd $(TOOLS)/promtool && promtool test rules $(notdir $(wildcard $(MONITORING)/tests/*.yaml))

## bench: the quick benchmarks: reconcile scale at 1,000 Sites and 5 s of webhook load for each
## of the three quick cases (typical Site, 16 http/1.1 connections: validate, fixed, bare).
bench:
	SCALE_SITES=1000 $(CARGO) bench --locked --bench scale
	WEBHOOK_QUICK=1 WEBHOOK_SECONDS=5 $(CARGO) bench --locked --bench webhook

## bench-ab: the webhook of this tree against the webhook of commit OLD (built into target/ab/),
## alternated, CREATE then UPDATE reviews; wrk comes from Debian.
OLD ?= 35e41b3
bench-ab:
	@command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	$(CARGO) build --release --locked -p sites-operator -p sites-emulator --bins
	python3 benches/webhook_ab.py --old $(OLD) --seconds 6 --rounds 5
	python3 benches/webhook_ab.py --old $(OLD) --seconds 6 --rounds 3 --update

## bench-hostile: the hostile-load matrix (benches/webhook_flood.py --matrix): eight shapes of
## hostile connections (HTTP/2 zero and byte windows, pipelining without reading, slowloris, slow
## and 5 MB bodies, the configuration CPU shape, many invalid keys) at 32 and 256 connections,
## each beside an ordinary client, against the release build; about 12 minutes after the build.
## The `h2` package (PyPI) goes into .tools/venv; one JSON line per run into .tools/.
H2_VERSION := 4.4.1
HOSTILE_SECONDS ?= 30
RELEASE := $(or $(CARGO_TARGET_DIR),target)/release
bench-hostile: $(VENV)/.h2-$(H2_VERSION)
	$(CARGO) build --release --locked -p sites-operator -p sites-emulator --bins
	$(VENV)/bin/python benches/webhook_flood.py --operator $(RELEASE)/sites-operator \
		--emulator $(RELEASE)/sites-emulator --matrix --seconds $(HOSTILE_SECONDS) \
		--json $(TOOLS)/bench-hostile.jsonl

$(VENV)/.h2-$(H2_VERSION):
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check h2==$(H2_VERSION)
	touch $@

## bench-full: every benchmark at the sizes BENCHMARKS.md records (about 15 minutes after the build).
bench-full:
	$(CARGO) bench --locked --bench admission
	$(CARGO) bench --locked --bench watch_decode
	$(CARGO) bench --locked --bench webhook
	SCALE_SITES=1000 $(CARGO) bench --locked --bench scale
	SCALE_SITES=10000 SCALE_STEPS=storm $(CARGO) bench --locked --bench scale
	$(CARGO) bench --locked -p sites-emulator --bench api

## fuzz: the short fuzzing run: every cargo-fuzz target for FUZZ_SECONDS seconds, built
## unoptimised (a short build) with AddressSanitizer (the webhook's review reader and apply
## annotation scan use `unsafe` SIMD code) (scripts/fuzz.sh, which installs cargo-fuzz into
## .tools/; docs/fuzzing.md for long runs).
FUZZ_SECONDS ?= 20
FUZZ_PROFILE ?= dev
FUZZ_SANITIZER ?= address
fuzz:
	FUZZ_PROFILE=$(FUZZ_PROFILE) FUZZ_SANITIZER=$(FUZZ_SANITIZER) scripts/fuzz.sh $(FUZZ_SECONDS)

## image: build the container image (needs a container engine).
IMAGE ?= sites-operator:dev
image:
	docker build -t $(IMAGE) .

## kind-e2e: build the image, create a kind cluster, deploy, run the e2e suite against it.
## Needs docker and kind; not runnable on machines without a container engine.
KIND_CLUSTER ?= sites-e2e
KIND_KUBECONFIG ?= $(TOOLS)/kind-$(KIND_CLUSTER).kubeconfig
kind-e2e: image
	kind get clusters | grep -qx $(KIND_CLUSTER) || kind create cluster --name $(KIND_CLUSTER)
	kind get kubeconfig --name $(KIND_CLUSTER) > $(KIND_KUBECONFIG)
	kind load docker-image $(IMAGE) --name $(KIND_CLUSTER)
	KUBECONFIG=$(KIND_KUBECONFIG) scripts/kind-e2e.sh

## kind-e2e-check: what CI can check of kind-e2e without a container engine: the script parses,
## the overlay renders (validated above), the Dockerfile names the binary it builds.
kind-e2e-check:
	bash -n scripts/kind-e2e.sh
	bash -n scripts/playground.sh
	grep -q 'cargo build --locked --release -p sites-operator' Dockerfile
	$(MAKE) -n kind-e2e >/dev/null

## tools: install the test tools: kubernetes-validate into .tools/venv, and Prometheus (promtool
## and the server, Debian package `prometheus`) when missing.
tools: $(VENV)/bin/kubernetes-validate prometheus-tools

prometheus-tools:
	@command -v promtool >/dev/null && command -v prometheus >/dev/null || { \
		SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

$(VENV)/bin/kubernetes-validate:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check kubernetes-validate==$(KUBERNETES_VALIDATE_VERSION)

clean:
	$(CARGO) clean
	rm -rf $(TOOLS)
