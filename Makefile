# The two commands a newcomer needs (see README): `make demo` and `make test`.
# Everything else here is what they call.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test unit e2e venv cluster-binaries image bench clean

demo: venv cluster-binaries
	$(VENV)/bin/offpeak demo

# The Kubernetes binaries first (built from Go modules into ${OFFPEAK_CACHE:-~/.cache/offpeak} on the first run;
# the chart tests of the unit stage need helm and kube-scheduler), then the unit tests, then the end-to-end
# scenarios on the real control plane. Each stage prints how long it took and its slowest tests. The unit tests run
# on every core (pytest-xdist; they share no state). The end-to-end lanes (one test file each) run in E2E_WORKERS
# test processes that share one cluster (docs/e2e.md): they mostly wait on compressed clocks, so more processes
# than cores pay off.
E2E_WORKERS ?= 6
test: venv cluster-binaries
	@t=$$(date +%s); $(PY) -m pytest -p no:cacheprovider -n auto --dist worksteal --durations=15 tests; rc=$$?; \
	  echo "[stage] unit tests: $$(( $$(date +%s) - t ))s"; exit $$rc
	@t=$$(date +%s); $(PY) -m pytest -p no:cacheprovider -n $(E2E_WORKERS) --dist loadfile e2e; rc=$$?; \
	  echo "[stage] end-to-end: $$(( $$(date +%s) - t ))s"; exit $$rc

unit: venv
	$(PY) -m pytest -n auto --dist worksteal tests

cluster-binaries: venv
	@t=$$(date +%s); $(PY) -m offpeak_e2e.build; rc=$$?; \
	  echo "[stage] cluster binaries: $$(( $$(date +%s) - t ))s"; exit $$rc

e2e: venv
	$(PY) -m pytest -n $(E2E_WORKERS) --dist loadfile e2e

venv: $(STAMP)

$(STAMP): pyproject.toml
	@t=$$(date +%s); \
	  { test -x $(PY) || $(PYTHON) -m venv $(VENV); } && \
	  $(PY) -m pip install -q --disable-pip-version-check uv && \
	  $(VENV)/bin/uv pip install -q --python $(PY) -e '.[extract,dev]' && \
	  echo "[stage] python environment: $$(( $$(date +%s) - t ))s"
	@touch $(STAMP)

# The container images, built daemonlessly (debootstrap + buildah, no Docker engine or registry) and smoke-run with
# podman; root, ~12 min and ~8 GB (OFFPEAK_IMAGE_TARGETS=runtime: ~3 min). Not part of `make test`: docs/images.md.
image:
	bash docker/build-image.sh

bench: venv
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
