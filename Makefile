# SPDX-License-Identifier: Apache-2.0
# nttrace: setup, tests and validation. Run as root (bcc and perf need it).
#   make setup     install system packages, prepare the host, build .venv
#   make test      setup, then run the test suite: tests/unit, tests/live, tests/lab
#   make test-unit the unit tests alone (no root, no kernel, no guest): 2.5 minutes of CPU
#   make test-live setup, then the tests that need root on this host
#   make test-lab  setup, then the lab's guests and their kernels
#   make validate  setup, then run `nttrace validate`
#   make deb       the Debian package, dist/nttrace_<version>_amd64.deb (docs/install.md)
#   make docs      install, then write the docs' probe tables from the probes' declarations
VENV    ?= .venv
PY      := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup system-packages tracefs kernel-headers venv install test test-unit test-live test-lab validate deb docs clean

setup: system-packages tracefs kernel-headers install

system-packages:
	@tools/install-system-packages.sh

tracefs:
	@tools/mount-tracefs.sh

kernel-headers:
	@tools/link-fallback-kernel-headers.sh

$(PY):
	/usr/bin/python3 -m venv --system-site-packages $(VENV)

venv: $(PY)
	@# pytest, prometheus-client and import-linter come from PyPI into the venv itself, even where
	@# Debian's python3-pytest or python3-prometheus-client is installed (the venv sees those too)
	@test -x $(VENV)/bin/pytest -a -x $(VENV)/bin/lint-imports -a -n "$$(ls -d $(VENV)/lib/python3*/site-packages/prometheus_client 2>/dev/null)" \
		|| $(PY) -m pip install -q --ignore-installed prometheus-client pytest import-linter

# A non-editable install: the tests run against what a user would get.
install: venv
	@rm -rf build   # setuptools' build/lib keeps modules that moved or went away
	@$(PY) -m pip install -q --no-build-isolation --no-deps --force-reinstall .
	@$(PY) -c "import nttrace, nttrace._native; print('nttrace', nttrace.__version__, 'installed in $(VENV)')"

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

# install, not setup: the unit room needs no system package step, no root
test-unit: install
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

test-live: setup
	$(PY) -m pytest tests/live $(PYTEST_ARGS)

test-lab: setup
	$(PY) -m pytest tests/lab $(PYTEST_ARGS)

validate: setup
	$(VENV)/bin/nttrace validate

# Built by dpkg-buildpackage in a copy of the tree under /tmp; needs the
# build tools of tools/install-system-packages.sh (debhelper, dh-python).
deb:
	@tools/build-deb.sh dist

# docs/probes.md, docs/daemon.md and docs/validate.md: their probe tables (docs/probes.md, "Adding a probe")
docs: install
	$(PY) tools/probe_docs.py --write

clean:
	rm -rf build *.egg-info $(VENV) dist
