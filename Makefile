# The companion's commands. `make help` lists them; `make book` and `make test` work on a fresh clone.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The lock: exact versions and hashes of everything `make test` needs, torch's CPU build among them.
# The book lock is its part that the runtime and the book need: no test extra, whose ggml-python
# compiles C++, so `make book` needs no C++ toolchain.
LOCK := requirements/lock-cpu.txt
BOOK_LOCK := requirements/lock-book-cpu.txt
# PyPI has no torch+cpu wheel: pip looks for the lock's torch on TORCH_INDEX too (empty: only where
# pip's own configuration looks, e.g. a local find-links folder). TORCH_SPEC leaves the lock for
# torch alone, e.g. for CUDA:
#   make install TORCH_SPEC="torch==2.13.0" TORCH_INDEX=https://download.pytorch.org/whl/cu126
TORCH_SPEC ?=
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# `make lock` resolves for the interpreter the stored records were made with, and finds torch's CPU
# wheels here (a folder, or a page of links such as an index's torch page).
LOCK_PYTHON := 3.11.7
TORCH_WHEELS ?= https://download.pytorch.org/whl/cpu/torch/
UV_SPEC := uv==0.13.9
UV_COMPILE = -c requirements/torch-cpu.in --find-links $(TORCH_WHEELS) --generate-hashes \
	--python-version $(LOCK_PYTHON) --python-platform x86_64-manylinux_2_28 --custom-compile-command "make lock"
PAPER ?=
PARAMS ?=
PRESET ?= quick
BOOK_STAMP := $(VENV)/.installed-book
STAMP := $(VENV)/.installed
KERNEL := $(VENV)/share/jupyter/kernels/companion/kernel.json

# Lock $(1) as pip reads it: with TORCH_SPEC, without its torch entry (name line to last hash).
locked = $(if $(TORCH_SPEC),<(awk '/^torch==/ {t = 1} !t; t && !/\\$$/ {t = 0}' $(1)),$(1))
# torch goes first and alone, so that only torch is looked up on TORCH_INDEX: an extra index is
# asked for every package, which is slow, and stalls on retries where the index is unreachable.
ifeq ($(TORCH_SPEC),)
TORCH_INSTALL = --require-hashes --no-deps $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) \
	-r <(awk '/^torch==/ {t = 1} t; t && !/\\$$/ {exit}' $(BOOK_LOCK))
else
TORCH_INSTALL = "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
endif

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(BOOK_STAMP): $(BOOK_LOCK) pyproject.toml Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11) and "the lock is for Python 3.11, \
	not $(VENV)/bin/python " + sys.version.split()[0] + ": rm -r $(VENV), then make install PYTHON=python3.11")'
	$(BIN)/python -m pip install --quiet $(TORCH_INSTALL)
	$(BIN)/python -m pip install --quiet --require-hashes -r $(call locked,$(BOOK_LOCK))
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@touch $@

$(STAMP): $(BOOK_STAMP) $(LOCK)
	$(BIN)/python -m pip install --quiet --require-hashes -r $(call locked,$(LOCK))
	@touch $@

$(KERNEL): $(BOOK_STAMP) src/companion/kernelspec.py $(wildcard src/companion/numerics.py)
	$(BIN)/python -m companion.kernelspec

install: $(STAMP) $(KERNEL) ## create .venv, install the lock, the companion (editable) and its Jupyter kernel

lock: ## regenerate the locks from pyproject.toml, keeping locked versions that still fit (UPGRADE=1: newest)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(UV_SPEC)"
	$(BIN)/uv pip compile --quiet pyproject.toml --extra test $(UV_COMPILE) $(if $(UPGRADE),--upgrade) -o $(LOCK)
	$(BIN)/uv pip compile --quiet pyproject.toml --extra book -c $(LOCK) $(UV_COMPILE) -o $(BOOK_LOCK)

book: $(BOOK_STAMP) ## build the site into book/_build/html (from the stored notebooks, no execution)
	$(BIN)/python -m companion.book build

launch: $(BOOK_STAMP) ## give every notebook the Colab/Binder install cell for repository.url in book/_config.yml
	$(BIN)/python -m companion.book launch

notebooks: $(BOOK_STAMP) $(KERNEL) ## re-execute the stored notebooks at the quick preset (PAPER=slug for one)
	$(BIN)/companion store $(PAPER)

run: $(BOOK_STAMP) $(KERNEL) ## run one paper: make run PAPER=fdiv-losses PARAMS="seeds=5 lm_steps=600" PRESET=quick
	@test -n "$(PAPER)" || { echo "make run needs PAPER=<slug>; see: make list"; exit 2; }
	$(BIN)/companion run $(PAPER) --preset $(PRESET) $(foreach p,$(PARAMS),-p $(p))

sweep: $(BOOK_STAMP) $(KERNEL) ## sweep one parameter: make sweep PAPER=fdiv-losses PARAMS="lm_steps=300,600,900"
	@test -n "$(PAPER)" || { echo "make sweep needs PAPER=<slug> PARAMS=name=v1,v2"; exit 2; }
	$(BIN)/companion sweep $(PAPER) --preset $(PRESET) $(foreach p,$(PARAMS),-p $(p))

list: $(BOOK_STAMP) ## list the papers and their last verdicts
	$(BIN)/companion list

status: $(BOOK_STAMP) ## last run, runtime and verdicts of every paper
	$(BIN)/companion status

unit: install ## the fast tests only (library, CLI validation): for iteration
	$(BIN)/python -m pytest -m "not slow and not browser" tests

test: install ## every test: unit, CLI and runner, nbval over notebooks/, book build, the site in Chromium
	$(BIN)/companion numerics
	$(BIN)/python -m pytest -m "not browser" tests
	$(BIN)/python -m companion.numerics $(BIN)/python -m pytest -p tests.nbval_verdicts --nbval-lax --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider --durations=20 notebooks
	$(BIN)/python -m companion.book build
	$(BIN)/python -m pytest -m browser -rs tests/test_browser.py

bench: install ## performance anchors: our time / reference time, measured in one run
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python -m companion.numerics $(BIN)/python $$b; done

clean: ## remove build outputs and run folders (keeps .venv)
	rm -rf book/_build book/papers book/generated runs .pytest_cache
	find . -name __pycache__ -type d -prune -not -path './$(VENV)/*' -exec rm -rf {} +

.PHONY: help install lock book notebooks run sweep list status unit test bench clean
