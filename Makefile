# labzarr — `make demo` and `make test` work on a fresh Debian 12 machine (as root, or with sudo).
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# A CPU build lies on these machines' disk; an unpinned torch would pull a multi-GB CUDA build.
# Override with e.g. `make demo TORCH=torch==2.5.1`.
TORCH  ?= torch==2.13.0
# libturbojpeg0: PyTurboJPEG's libjpeg-turbo (Debian 12 ships 2.1, hence pyturbojpeg<2 in pyproject.toml).
APT_PACKAGES ?= libturbojpeg0
# Only `make test`/`make stress` install these. chromium: the report test loads the QC page in headless
# Chromium. libjpeg-turbo-progs: jpegtran, with which the JPEG tests transcode files losslessly to arithmetic coding.
APT_TEST_PACKAGES ?= chromium libjpeg-turbo-progs
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
STAMP  := $(VENV)/.stamp-install
DELIVERY ?=
SPECS  := $(if $(DELIVERY),manifests/$(DELIVERY)/delivery.toml,$(wildcard manifests/*/delivery.toml))
# A DELIVERY with no spec is named as such, with the deliveries there are, before anything runs.
KNOWN  := $(patsubst manifests/%/delivery.toml,%,$(wildcard manifests/*/delivery.toml))
define check_delivery
	@if [ -n "$(DELIVERY)" ] && [ ! -f "manifests/$(DELIVERY)/delivery.toml" ]; then \
		echo "make: no delivery '$(DELIVERY)': manifests/$(DELIVERY)/delivery.toml not found (deliveries: $(or $(KNOWN),none))" >&2; \
		exit 2; fi
endef
PYTEST_ARGS ?=
# Test processes for `make test` (pytest-xdist; each file runs whole in one of them). 0: one process.
# --no-loadscope-reorder: files go out in collection order, which tests/conftest.py starts with the longest
# files; xdist's own order (most tests first) left files of one long test to run alone at the end.
# Three on the 2 cores CI has: much of the suite waits on processes it starts (clusters, training ranks, the
# moto server, the CLI), and a third file fills those waits.
TEST_JOBS ?= 3

.PHONY: help install test-deps demo test typecheck lint stress init check convert report diff verify inspect bench clean

help:
	@echo "make demo     install everything, build a messy sample delivery, convert it, print the summary"
	@echo "make test     install everything, run the test suite"
	@echo "make init     write manifests/NAME/delivery.toml for a new delivery: make init NAME=lab-2026-11 RAW=data/raw/lab-2026-11"
	@echo "make check    what convert would do with every spec (or DELIVERY=name): items, ID collisions, labels; nothing decoded"
	@echo "make convert  convert every manifests/*/delivery.toml (or DELIVERY=name)"
	@echo "make inspect  describe every converted store (or DELIVERY=name)"
	@echo "make report   write the QC page data/reports/<delivery>/index.html (or DELIVERY=name)"
	@echo "make diff     what changed in manifests/<delivery>/manifest.csv since its last commit (or DELIVERY=name)"
	@echo "make verify   re-read every chunk of every converted store, check checksums and hashes (or DELIVERY=name)"
	@echo "make stress   the long trials (tests marked slow; the scale section at 1,000,000 files)"
	@echo "make typecheck  mypy --strict over the installed layout of the package (also part of make test)"
	@echo "make lint     ruff check with the rules in pyproject.toml (also part of make test)"
	@echo "make bench    run the benchmarks (one table per section, ratios vs baselines)"
	@echo "make clean    remove data/, the venv and caches"

# $(call apt_install,PACKAGES): install the Debian packages that are missing (dpkg -s is the check).
define apt_install
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
endef

install: $(STAMP)

test-deps:
	$(call apt_install,$(APT_TEST_PACKAGES))

$(STAMP): pyproject.toml Makefile
	$(call apt_install,$(APT_PACKAGES))
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[test]"
	@touch $@

demo: $(STAMP)
	$(BIN)/labzarr demo data/raw/demo
	$(BIN)/labzarr convert manifests/demo/delivery.toml
	$(BIN)/labzarr inspect data/stores/demo.zarr

test: $(STAMP) test-deps
	$(BIN)/python -m pytest -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# NAME and RAW are required; FORCE=1 overwrites an existing spec.
init: $(STAMP)
	@if [ -z "$(NAME)" ] || [ -z "$(RAW)" ]; then \
		echo "make: init needs NAME and RAW, e.g. make init NAME=lab-2026-11 RAW=data/raw/lab-2026-11" >&2; exit 2; fi
	$(BIN)/labzarr init "$(NAME)" --raw "$(RAW)"$(if $(FORCE), --force)

check: $(STAMP)
	$(call check_delivery)
	@for spec in $(SPECS); do echo "== $$spec"; $(BIN)/labzarr check $$spec || exit $$?; done

convert: $(STAMP)
	$(call check_delivery)
	@for spec in $(SPECS); do echo "== $$spec"; $(BIN)/labzarr convert $$spec || exit $$?; done

report: $(STAMP)
	$(call check_delivery)
	@for spec in $(SPECS); do echo "== $$spec"; $(BIN)/labzarr report $$spec || exit $$?; done

# The working manifest against the committed one: review before `git commit manifests/`.
diff: $(STAMP)
	$(call check_delivery)
	@for spec in $(SPECS); do m=$$(dirname $$spec)/manifest.csv; \
		$(BIN)/labzarr diff git:HEAD:$$m $$m || exit $$?; done

inspect: $(STAMP)
	$(call check_delivery)
	@for spec in $(SPECS); do echo "== $$(basename $$(dirname $$spec))"; $(BIN)/labzarr inspect $$spec || exit $$?; done

verify: $(STAMP)
	$(call check_delivery)
	@# make itself exits 2 whenever a command fails: say what labzarr's own code meant (1: damage found).
	@for spec in $(SPECS); do echo "== $$(basename $$(dirname $$spec))"; $(BIN)/labzarr verify $$spec || { \
		rc=$$?; [ $$rc = 1 ] && echo "make: verify found damage in $$spec (labzarr verify exits 1; make exits 2 on any failure)" >&2; \
		exit $$rc; }; done

typecheck: $(STAMP)
	$(BIN)/python -m pytest -q tests/test_typing.py

lint: $(STAMP)
	$(BIN)/python -m pytest -q tests/test_lint.py

# The long trials: the tests marked slow, then the scale section at 100,000 and 1,000,000 tiny files (an hour or more).
stress: $(STAMP) test-deps
	$(BIN)/python -m pytest -m slow $(PYTEST_ARGS)
	$(BIN)/python -m pip install -q -e ".[test,bench]"
	$(BIN)/python bench/run.py --only scale --scale-sizes 100000 1000000

bench: $(STAMP)
	$(BIN)/python -m pip install -q -e ".[test,bench]"
	$(BIN)/python bench/run.py

clean:
	rm -rf data $(VENV) .pytest_cache build dist *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
