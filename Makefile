# The two commands a new user needs: `make run` and `make test`. Each sets itself up.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test test-all bench lint docs gallery docs-inventories clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e ".[test,plot]"
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/dkpca demo --out demo-output

test: $(STAMP)
	DASK_ARRAY__QUERY_PLANNING=False $(PY) -m pytest -q

test-all: $(STAMP)
	DASK_ARRAY__QUERY_PLANNING=False $(PY) -m pytest -q -m "slow or not slow"

bench: $(STAMP)
	$(PY) -m pip install --quiet -e ".[test,plot,bench]"
	$(PY) benchmarks/bench_pca.py
	$(PY) benchmarks/bench_kernel.py
	$(PY) benchmarks/bench_kpca.py
	$(PY) benchmarks/bench_nystrom.py
	$(PY) benchmarks/bench_landmarks.py
	$(PY) benchmarks/bench_selection.py
	$(PY) benchmarks/bench_loo.py
	$(PY) benchmarks/bench_scaling.py
	$(PY) benchmarks/bench_krylov.py
	$(PY) benchmarks/bench_incremental.py
	$(PY) benchmarks/bench_pca_blocks.py
	$(PY) benchmarks/bench_pca_randomized.py --n-samples 30000 --n-features 30000 --chunk 2500 --memory-fraction 0.8

# The Sphinx site, warnings as errors, then its internal links (no network needed).
docs: $(STAMP)
	$(PY) -m pip install --quiet -e ".[test,plot,docs]"
	$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html
	$(PY) docs/check_links.py docs/_build/html
	$(PY) docs/check_offline.py docs/_build/html

# Rerun every example at full settings; the figures and output land in docs/_static/gallery.
gallery: $(STAMP)
	MPLBACKEND=Agg $(PY) docs/run_examples.py

docs-inventories: $(STAMP)
	$(PY) docs/make_inventories.py

# ruff pinned: a new release's rules must not turn CI red on unchanged code.
lint: $(STAMP)
	$(PY) -m pip install --quiet "ruff==0.17.6"
	$(VENV)/bin/ruff check dkpca tests benchmarks examples docs

clean:
	rm -rf $(VENV) demo-output .pytest_cache docs/_build docs/api/generated docs/gallery docs/cli.rst
