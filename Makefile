# Two commands on a fresh machine: `make run` (the local stack) and `make test` (the default suite).
PYTHON ?= python3.11
VENV := .venv
PIP := $(VENV)/bin/pip
export OMP_NUM_THREADS ?= 1
export OPENBLAS_NUM_THREADS ?= 1

.PHONY: run test test-without-tools test-slow test-fuzz test-readme test-package lint bench install install-dev system-deps package deploy clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# The local MiniLM with int8 arithmetic is quantised once here (a few seconds), not on the first embed.
$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(PIP) install --quiet -e '.[local]'
	$(VENV)/bin/python -m chalicelib.adapters.models.local_onnx
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(VENV)/bin/python
	$(PIP) install --quiet -e '.[dev]'
	$(VENV)/bin/python -m chalicelib.adapters.models.local_onnx
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

# Optional OCR/office converters (Debian packages); the pipeline works without them and says so.
system-deps:
	bash scripts/install-parser-system-deps.sh

run: install
	$(VENV)/bin/weknora-ingest up

# One worker per core, at most 4 (each runs its own moto server and local stack).
test: install-dev
	$(VENV)/bin/pytest -n auto --maxprocesses 4

# The default suite as on a fresh machine: the optional system tools hidden from PATH, so every test that
# needs one must skip with its reason (CI runs this, then `make test` with the tools installed and required).
test-without-tools: install-dev
	$(VENV)/bin/python scripts/without_system_tools.py $(VENV)/bin/pytest -n auto --maxprocesses 4

test-slow: install-dev
	$(VENV)/bin/pytest -m slow

# Schemathesis against the served OpenAPI document (no 5xx; WEKNORA_FUZZ_EXAMPLES examples per operation)
# and the file readers on damaged corpus files (WEKNORA_FUZZ_SECONDS each); WEKNORA_FUZZ_SEED draws others.
test-fuzz: install-dev
	$(VENV)/bin/pytest -m 'schemathesis or fuzz' -n 2

# The README's quickstart as written: `make run` (on a free port, with its own state) and every command after it.
test-readme: install-dev
	$(VENV)/bin/pytest -m readme tests/local/test_readme_quickstart.py

# The artifact's own checks (slow): two builds give the same bytes; every zip function imports what it runs
# from its own package within Lambda's limits; the docreader image's packages install clean and the stage
# imports and parses from them (scripts/check_docreader_image.py, no Docker needed).
test-package: install-dev
	$(VENV)/bin/pytest -m slow tests/infra/test_build_reproducible.py tests/infra/test_lambda_package.py tests/infra/test_docreader_image.py

# The deployable artifact in out/: sam.json, the functions' code and layers (with bytecode), checked per
# function (size, imports); `sam build -t out/sam.json` then builds the docreader image.
package: install-dev
	$(VENV)/bin/python scripts/build_lambda.py --out out

# Build and deploy to AWS with SAM (guided the first time), create the operator key if missing, print the API
# URL and the first tenant's curl (README, Deploy to AWS). DEPLOY_ARGS: e.g. --dry-run, --guided.
deploy:
	$(PYTHON) scripts/deploy.py $(DEPLOY_ARGS)

lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy chalicelib bench

clean:
	rm -rf .weknora .pytest_cache .mypy_cache .ruff_cache
