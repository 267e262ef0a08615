# The two commands a newcomer needs (see README): `make demo` and `make test`.
# Everything else here is what they call.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test unit e2e venv cluster-binaries bench clean

demo: venv
	$(VENV)/bin/offpeak demo

test: venv
	$(PY) -m pytest --durations=15 tests e2e

unit: venv
	$(PY) -m pytest tests -m "not e2e"

e2e: venv
	$(PY) -m pytest e2e

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check uv
	$(VENV)/bin/uv pip install -q --python $(PY) -e '.[extract,dev]'
	@touch $(STAMP)

bench: venv
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
