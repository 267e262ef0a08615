# The two commands a newcomer needs (see README): `make demo` and `make test`.
# Everything else here is what they call.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test unit e2e venv cluster-binaries bench clean

demo: venv
	$(VENV)/bin/offpeak demo

# Unit tests first (fast feedback), then the end-to-end scenarios on the real control plane (the first run
# builds the Kubernetes binaries from Go modules into ~/.cache/offpeak). Each stage prints how long it took.
test: venv
	@t=$$(date +%s); $(PY) -m pytest -p no:cacheprovider --durations=10 tests; rc=$$?; \
	  echo "[stage] unit tests: $$(( $$(date +%s) - t ))s"; exit $$rc
	@t=$$(date +%s); $(PY) -m pytest -p no:cacheprovider --durations=25 e2e; rc=$$?; \
	  echo "[stage] end-to-end (incl. any Go builds): $$(( $$(date +%s) - t ))s"; exit $$rc

unit: venv
	$(PY) -m pytest tests

cluster-binaries: venv
	$(PY) -m offpeak_e2e.build

e2e: venv
	$(PY) -m pytest e2e

venv: $(STAMP)

$(STAMP): pyproject.toml
	@t=$$(date +%s); \
	  { test -x $(PY) || $(PYTHON) -m venv $(VENV); } && \
	  $(PY) -m pip install -q --disable-pip-version-check uv && \
	  $(VENV)/bin/uv pip install -q --python $(PY) -e '.[extract,dev]' && \
	  echo "[stage] python environment: $$(( $$(date +%s) - t ))s"
	@touch $(STAMP)

bench: venv
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
