# nttrace: setup, tests and validation. Run as root (bcc and perf need it).
#   make setup     install system packages, prepare the host, build .venv
#   make test      setup, then run the test suite
#   make validate  setup, then run `nttrace validate`
VENV    ?= .venv
PY      := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup system-packages tracefs kernel-headers venv install test validate clean

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
	@$(PY) -c "import prometheus_client, pytest, importlinter" 2>/dev/null || $(PY) -m pip install -q prometheus-client pytest import-linter

# A non-editable install: the tests run against what a user would get.
install: venv
	@rm -rf build   # setuptools' build/lib keeps modules that moved or went away
	@$(PY) -m pip install -q --no-build-isolation --no-deps --force-reinstall .
	@$(PY) -c "import nttrace, nttrace._native; print('nttrace', nttrace.__version__, 'installed in $(VENV)')"

test: setup
	$(VENV)/bin/pytest $(PYTEST_ARGS)

validate: setup
	$(VENV)/bin/nttrace validate

clean:
	rm -rf build *.egg-info $(VENV)
