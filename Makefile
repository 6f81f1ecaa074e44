# The two commands of the README (`make demo`, `make test`) install what
# they need first; `make install` is idempotent and takes seconds once done.
# `make install` installs the runtime (scripts/install.sh); `make
# install-dev` the runtime and the test, lint and docs tools of
# requirements/tests.txt (scripts/install.sh --tests), which `make test`
# runs; `make lint` and `make docs` check those tools first (well under a
# second) and install them where one is missing.
PYTHON ?= python3
export PYTHON
PYTEST_ARGS ?=
# The suite's tests run in parallel processes (pytest-xdist), one a CPU, at
# most four: most tests wait on a subprocess or run tiny models on one
# thread, so two processes keep a 2-CPU CI machine busy. Work stealing
# evens out the long end-to-end tests. PYTEST_WORKERS=0 runs them in this
# process, one after another.
PYTEST_WORKERS ?= auto
PYTEST_PARALLEL = --numprocesses=$(PYTEST_WORKERS) --maxprocesses=4 --dist=worksteal
# The second supported torch (requirements/torch-cu12.txt) and the virtual
# environment `make test-compat` keeps it in, inside the checkout.
COMPAT_PAIR ?= cu12
COMPAT_VENV ?= .venv-torch-$(COMPAT_PAIR)

.PHONY: install install-dev test-deps demo test test-compat test-quick test-fast doctest lint format docs

install:
	bash scripts/install.sh

install-dev:
	bash scripts/install.sh --tests

test-deps:
	$(PYTHON) scripts/check_env.py --part tests --quiet || \
		bash scripts/install.sh --tests

demo: install
	$(PYTHON) tools/demo.py

lint: test-deps
	$(PYTHON) -m flake8 mmlape tools tests configs benchmarks scripts setup.py
	$(PYTHON) -m isort --check-only --diff mmlape tools tests configs benchmarks scripts setup.py
	$(PYTHON) -m yapf --diff --recursive mmlape tools tests configs benchmarks scripts setup.py
	lint-imports

# The documentation site (mkdocs.yml) into site/, strictly: a broken link
# or anchor, or any other warning, fails.
docs: test-deps
	$(PYTHON) -m mkdocs build --strict --quiet

format:
	$(PYTHON) -m isort mmlape tools tests configs benchmarks scripts setup.py
	$(PYTHON) -m yapf --in-place --recursive mmlape tools tests configs benchmarks scripts setup.py

# CI: everything, the docstring examples included, then the quick suite on
# the second supported torch.
test: install-dev lint docs
	$(PYTHON) -m pytest $(PYTEST_PARALLEL) $(PYTEST_ARGS)
	$(PYTHON) -m pytest --doctest-modules mmlape -p no:cacheprovider
	$(MAKE) test-compat

# On the CUDA 12 torch pair, in its own virtual environment with its own
# mmcv build (made on the first run, in seconds afterwards): the quick tests
# of what torch's version can change (the models, their checkpoints and
# safe loading, the run wing's parts); the tools and configs above them call
# the same code.
COMPAT_TESTS ?= tests/models tests/hosts tests/utils \
	tests/apis/test_checkpoint_safety.py
test-compat:
	test -x $(COMPAT_VENV)/bin/python || $(PYTHON) -m venv $(COMPAT_VENV)
	TORCH_PAIR=$(COMPAT_PAIR) PYTHON=$(COMPAT_VENV)/bin/python bash scripts/install.sh --tests
	$(COMPAT_VENV)/bin/python -m pytest -m "not slow" -p no:cacheprovider $(PYTEST_PARALLEL) $(COMPAT_TESTS) $(PYTEST_ARGS)

# The quick loop while editing (no subprocess or training runs).
test-quick:
	$(PYTHON) -m pytest -m "not slow" $(PYTEST_PARALLEL) $(PYTEST_ARGS)

# The fastest loop: the quick one without the infrastructure tests
# (tests/infra/: install, environment, GPU scripts, CUDA build); CI runs them.
test-fast:
	$(PYTHON) -m pytest -m "not slow and not infra" $(PYTEST_PARALLEL) $(PYTEST_ARGS)

doctest:
	$(PYTHON) -m pytest --doctest-modules mmlape -p no:cacheprovider
