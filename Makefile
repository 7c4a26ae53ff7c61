# The companion's commands. `make help` lists them; `make book` and `make test` work on a fresh clone.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The torch build to install: the CPU wheel by default. For CUDA, e.g.
#   make install TORCH_SPEC="torch==2.13.0" TORCH_INDEX=https://download.pytorch.org/whl/cu126
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
PAPER ?=
PARAMS ?=
PRESET ?= quick
STAMP := $(VENV)/.installed

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install --quiet -e ".[dev]" "$(TORCH_SPEC)"
	@touch $(STAMP)

install: $(STAMP) ## create .venv and install the companion (a no-op when nothing changed)

book: install ## build the site into book/_build/html (from the stored notebooks, no execution)
	$(BIN)/python -m companion.book build

launch: install ## give every notebook the Colab/Binder install cell for repository.url in book/_config.yml
	$(BIN)/python -m companion.book launch

notebooks: install ## re-execute the stored notebooks at the quick preset (PAPER=slug for one)
	$(BIN)/companion store $(PAPER)

run: install ## run one paper: make run PAPER=fdiv-losses PARAMS="seeds=5 lm_steps=600" PRESET=quick
	@test -n "$(PAPER)" || { echo "make run needs PAPER=<slug>; see: make list"; exit 2; }
	$(BIN)/companion run $(PAPER) --preset $(PRESET) $(foreach p,$(PARAMS),-p $(p))

sweep: install ## sweep one parameter: make sweep PAPER=fdiv-losses PARAMS="lm_steps=300,600,900"
	@test -n "$(PAPER)" || { echo "make sweep needs PAPER=<slug> PARAMS=name=v1,v2"; exit 2; }
	$(BIN)/companion sweep $(PAPER) --preset $(PRESET) $(foreach p,$(PARAMS),-p $(p))

list: install ## list the papers and their last verdicts
	$(BIN)/companion list

status: install ## last run, runtime and verdicts of every paper
	$(BIN)/companion status

unit: install ## the fast tests only (library, CLI validation): for iteration
	$(BIN)/python -m pytest -m "not slow and not browser" tests

test: install ## every test: unit, CLI and runner, nbval over notebooks/, book build, the site in Chromium
	$(BIN)/python -m pytest -m "not browser" tests
	$(BIN)/python -m pytest --nbval-lax --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider --durations=20 notebooks
	$(BIN)/python -m companion.book build
	$(BIN)/python -m pytest -m browser -rs tests/test_browser.py

bench: install ## performance anchors: our time / reference time, measured in one run
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b; done

clean: ## remove build outputs and run folders (keeps .venv)
	rm -rf book/_build book/papers book/generated runs .pytest_cache
	find . -name __pycache__ -type d -prune -not -path './$(VENV)/*' -exec rm -rf {} +

.PHONY: help install book notebooks run sweep list status unit test bench clean
