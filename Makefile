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
# the chart tests of the unit stage need helm and kube-scheduler), then the unit tests and the end-to-end scenarios
# on the real control plane. The end-to-end lanes (one test file each) run in E2E_WORKERS test processes that share
# one cluster (docs/e2e.md); they mostly wait on compressed clocks, so the unit tests run beside them (niced, on
# both cores) and the e2e output follows once both are done (E2E_BESIDE_UNIT=0: one after the other). Each stage
# prints how long it took and its slowest tests; exit status 0 only if both passed.
E2E_WORKERS ?= 6
E2E_BESIDE_UNIT ?= 1
E2E_LOG = $(or $(OFFPEAK_CACHE),$(HOME)/.cache/offpeak)/e2e-last.log
UNIT_TESTS = $(PY) -m pytest -p no:cacheprovider -n 2 --dist worksteal --durations=15 tests
E2E_TESTS = $(PY) -m pytest -p no:cacheprovider -n $(E2E_WORKERS) --dist loadfile --no-loadscope-reorder e2e
test: venv cluster-binaries
	@mkdir -p "$(dir $(E2E_LOG))"; t=$$(date +%s); \
	if [ "$(E2E_BESIDE_UNIT)" = 1 ]; then \
	  ( $(E2E_TESTS) > "$(E2E_LOG)" 2>&1; rc=$$?; \
	    echo "[stage] end-to-end: $$(( $$(date +%s) - t ))s" >> "$(E2E_LOG)"; echo $$rc > "$(E2E_LOG).rc" ) & \
	  nice -n 5 $(UNIT_TESTS); u=$$?; echo "[stage] unit tests: $$(( $$(date +%s) - t ))s"; \
	  echo "[stage] unit tests done; waiting for the end-to-end stage (log: $(E2E_LOG))"; wait; \
	  cat "$(E2E_LOG)"; e=$$(cat "$(E2E_LOG).rc"); \
	else \
	  $(UNIT_TESTS); u=$$?; echo "[stage] unit tests: $$(( $$(date +%s) - t ))s"; t=$$(date +%s); \
	  $(E2E_TESTS); e=$$?; echo "[stage] end-to-end: $$(( $$(date +%s) - t ))s"; \
	fi; \
	[ $$u = 0 ] && [ $$e = 0 ]

unit: venv
	$(UNIT_TESTS)

cluster-binaries: venv
	@t=$$(date +%s); $(PY) -m offpeak_e2e.build; rc=$$?; \
	  echo "[stage] cluster binaries: $$(( $$(date +%s) - t ))s"; exit $$rc

e2e: venv
	$(E2E_TESTS)

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
