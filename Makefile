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
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
STAMP  := $(VENV)/.stamp-install
DELIVERY ?=
SPECS  := $(if $(DELIVERY),manifests/$(DELIVERY)/delivery.toml,$(wildcard manifests/*/delivery.toml))
PYTEST_ARGS ?=

.PHONY: help install demo test stress convert verify inspect bench clean

help:
	@echo "make demo     install everything, build a messy sample delivery, convert it, print the summary"
	@echo "make test     install everything, run the test suite"
	@echo "make convert  convert every manifests/*/delivery.toml (or DELIVERY=name)"
	@echo "make inspect  describe every converted store (or DELIVERY=name)"
	@echo "make stress   the long trials (tests marked slow)"
	@echo "make bench    run the benchmarks (one table per section, ratios vs baselines)"
	@echo "make clean    remove data/, the venv and caches"

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[test]"
	@touch $@

demo: $(STAMP)
	$(BIN)/labzarr demo data/raw/demo
	$(BIN)/labzarr convert manifests/demo/delivery.toml
	$(BIN)/labzarr inspect data/stores/demo.zarr

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

convert: $(STAMP)
	@for spec in $(SPECS); do echo "== $$spec"; $(BIN)/labzarr convert $$spec || exit $$?; done

inspect: $(STAMP)
	@for spec in $(SPECS); do d=$$(basename $$(dirname $$spec)); \
		echo "== $$d"; $(BIN)/labzarr inspect data/stores/$$d.zarr || exit $$?; done

stress: $(STAMP)
	$(BIN)/python -m pytest -m slow $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m pip install -q -e ".[test,bench]"
	$(BIN)/python bench/run.py

clean:
	rm -rf data $(VENV) .pytest_cache build dist *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
