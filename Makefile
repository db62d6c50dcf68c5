# The two commands a new user needs: `make run` and `make test`. Each sets itself up.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test test-all bench lint clean

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

lint: $(STAMP)
	$(PY) -m pip install --quiet ruff
	$(VENV)/bin/ruff check dkpca tests benchmarks

clean:
	rm -rf $(VENV) demo-output .pytest_cache
