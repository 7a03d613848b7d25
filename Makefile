# sites-operator: build, test and lint entry points. `make test` is the one command that checks
# everything; CI (.ci/run) calls exactly that.

CARGO ?= cargo
PYTHON ?= python3
TOOLS := .tools
VENV := $(TOOLS)/venv
KUBERNETES_VALIDATE_VERSION := 1.37.0
# Kubernetes version the manifests are validated against (the emulator's and kubectl's).
KUBERNETES_VERSION := 1.32.0

.PHONY: all build test lint fmt fmt-check clippy unit crd crd-check validate-manifests tools clean

all: build

## build: compile the operator (debug).
build:
	$(CARGO) build --locked

## test: formatting, lints, every test, CRD drift and manifest validation.
test: fmt-check clippy unit crd-check validate-manifests

## lint: formatting and clippy with warnings as errors.
lint: fmt-check clippy

fmt:
	$(CARGO) fmt --all

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings

## unit: all Rust tests (cargo-nextest when installed, else cargo test).
unit:
	@if $(CARGO) nextest --version >/dev/null 2>&1; then \
		$(CARGO) nextest run --locked --workspace --no-fail-fast; \
	else \
		$(CARGO) test --locked --workspace --no-fail-fast; \
	fi

## crd: regenerate manifests/base/crd.yaml from the Rust types.
crd:
	$(CARGO) run --locked --quiet -- crd > manifests/base/crd.yaml

## crd-check: fail when manifests/base/crd.yaml differs from the generated CRD.
crd-check:
	@$(CARGO) run --locked --quiet -- crd | diff -u manifests/base/crd.yaml - \
		|| { echo "manifests/base/crd.yaml is out of date: run 'make crd'"; exit 1; }

## validate-manifests: validate the manifests against the Kubernetes API schemas.
validate-manifests: $(VENV)/bin/kubernetes-validate
	$(VENV)/bin/kubernetes-validate --strict --kubernetes-version $(KUBERNETES_VERSION) manifests/base/crd.yaml manifests/base/webhooks.yaml

## tools: install the test tools into .tools/ (a Python virtualenv for kubernetes-validate).
tools: $(VENV)/bin/kubernetes-validate

$(VENV)/bin/kubernetes-validate:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check kubernetes-validate==$(KUBERNETES_VALIDATE_VERSION)

clean:
	$(CARGO) clean
	rm -rf $(TOOLS)
