# adk-mesh — one entry point for development and CI. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BUF := node_modules/.bin/buf
PROTO_FILES := $(wildcard protos/adk_mesh/v1/*.proto)

.PHONY: help install proto proto-check lint format typecheck test bench demo clean deploy-check \
        deploy-test openapi openapi-check

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  \033[1m%-12s\033[0m %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

$(BUF): package.json
	npm install --no-audit --no-fund --silent
	@touch $(BUF)

# google-adk, for the gateway's compatibility tests (tests/gateway/test_google_adk_compat.py),
# in a virtualenv of its own (inside .venv): it pins opentelemetry below what adk-mesh needs, so the two cannot
# share one environment. The tests (and bench/runner.py's google-adk side) run its Python in a subprocess.
ADK_COMPAT := $(VENV)/adk-compat
ADK_COMPAT_VERSION ?= 2.13.0
ADK_COMPAT_STAMP := $(ADK_COMPAT)/.installed-$(ADK_COMPAT_VERSION)

$(ADK_COMPAT_STAMP):
	@test -x $(ADK_COMPAT)/bin/python || $(PYTHON) -m venv $(ADK_COMPAT)
	$(ADK_COMPAT)/bin/python -m pip install -q 'google-adk==$(ADK_COMPAT_VERSION)'
	@touch $(ADK_COMPAT_STAMP)

install: $(STAMP) ## Create .venv and install adk-mesh with its dev extras

proto: $(STAMP) ## Regenerate adk_mesh/v1 from protos/
	$(PY) scripts/gen_protos.py --out .

proto-check: $(STAMP) ## Fail if the committed generated code differs from a fresh generation
	@tmp=$$(mktemp -d) && $(PY) scripts/gen_protos.py --out $$tmp \
	  && diff -r -x __pycache__ $$tmp/adk_mesh/v1 adk_mesh/v1 \
	  && echo "generated code is up to date"; rc=$$?; rm -rf $$tmp; exit $$rc

openapi: $(STAMP) ## Regenerate gateway/openapi.json from the gateway's routes
	$(PY) -m gateway.openapi --write

openapi-check: $(STAMP) ## Fail if gateway/openapi.json differs from the gateway's routes
	$(PY) -m gateway.openapi --check

lint: $(STAMP) $(BUF) ## ruff check, ruff format --check, buf lint
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(BUF) lint

format: $(STAMP) ## Apply ruff's fixes and formatting
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

typecheck: $(STAMP) ## mypy --strict over adk_mesh (generated code excluded)
	$(VENV)/bin/mypy

test: $(STAMP) $(ADK_COMPAT_STAMP) ## Run the test suite (installs first if needed)
	ADK_COMPAT_PYTHON=$(ADK_COMPAT)/bin/python $(PY) -m pytest $(PYTEST_ARGS)

demo: $(STAMP) ## Start the reference mesh, run a scripted conversation, print events and span trees
	$(PY) scripts/demo.py

# bench/runner.py runs google-adk's side on .venv/adk-compat's Python (the same pin as the tests).
bench: $(STAMP) $(ADK_COMPAT_STAMP) ## Run the benchmarks in bench/ (not tests; prints figures)
	@for b in $$(ls bench/*.py | grep -v "/_"); do echo "== $$b"; \
	  ADK_COMPAT_PYTHON=$(ADK_COMPAT)/bin/python $(PY) $$b || exit 1; done

# deploy/: the container image, the Compose file and the Kubernetes manifests.
DEPLOY_TOOLS := $(VENV)/.deploy-tools
# Every rendered Kubernetes object validates against these versions (the oldest supported
# and the newest kubernetes-validate knows).
KUBERNETES_VERSIONS ?= 1.30.0 1.37.0

$(DEPLOY_TOOLS): $(STAMP)
	$(PY) -m pip install -q 'podman-compose==1.6.0' 'kubernetes-validate==1.37.0' \
	  'compose-spec==0.2.1'
	@touch $(DEPLOY_TOOLS)

deploy-check: $(DEPLOY_TOOLS) ## Render every Kubernetes overlay and validate each object; validate deploy/compose.yaml
	@command -v kubectl >/dev/null || { echo "deploy-check needs kubectl (with kustomize)"; exit 1; }
	@command -v podman >/dev/null || { echo "deploy-check needs podman (podman-compose config asks it its version): apt-get install podman"; exit 1; }
	@PYTHON=$(PY) deploy/kubernetes/overlays/dev/generate-secrets.sh >/dev/null
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	for overlay in deploy/kubernetes/overlays/*/; do \
	  name=$$(basename $$overlay); \
	  kubectl kustomize $$overlay > $$tmp/$$name.yaml || exit 1; \
	  for version in $(KUBERNETES_VERSIONS); do \
	    $(VENV)/bin/kubernetes-validate --strict --quiet -k $$version $$tmp/$$name.yaml || exit 1; \
	  done; \
	  echo "$$overlay: $$(grep -c '^kind:' $$tmp/$$name.yaml) objects valid on Kubernetes $(KUBERNETES_VERSIONS)"; \
	done
	$(PY) tests/deploy/check_compose.py deploy/compose.yaml
	$(PY) tests/deploy/check_compose.py deploy/compose.yaml tests/deploy/compose.test.yaml
	$(PY) -m pytest -q -p no:cacheprovider tests/deploy/test_manifests.py \
	  tests/deploy/test_manifests_adversarial.py tests/deploy/test_deploy_review.py

deploy-test: $(DEPLOY_TOOLS) ## Build the image, run deploy/compose.yaml (podman), a conversation and its trace
	PY=$(PY) tests/deploy/deploy-test.sh

clean: ## Remove the virtualenv, caches and local state
	rm -rf $(VENV) node_modules .pytest_cache .mypy_cache .ruff_cache .hypothesis .adk-mesh
