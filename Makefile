# The two commands of the README (`make demo`, `make test`) install what
# they need first; `make install` is idempotent and takes seconds once done.
PYTHON ?= python3
export PYTHON
PYTEST_ARGS ?=

.PHONY: install demo test test-quick doctest lint format

install:
	bash scripts/install.sh

demo: install
	$(PYTHON) tools/demo.py

lint:
	$(PYTHON) -m flake8 mmlape tools tests configs benchmarks scripts setup.py
	$(PYTHON) -m isort --check-only --diff mmlape tools tests configs benchmarks scripts setup.py
	$(PYTHON) -m yapf --diff --recursive mmlape tools tests configs benchmarks scripts setup.py
	lint-imports

format:
	$(PYTHON) -m isort mmlape tools tests configs benchmarks scripts setup.py
	$(PYTHON) -m yapf --in-place --recursive mmlape tools tests configs benchmarks scripts setup.py

# CI: everything, the docstring examples included.
test: install lint
	$(PYTHON) -m pytest $(PYTEST_ARGS)
	$(PYTHON) -m pytest --doctest-modules mmlape -p no:cacheprovider

# The quick loop while editing (no subprocess or training runs).
test-quick:
	$(PYTHON) -m pytest -m "not slow" $(PYTEST_ARGS)

doctest:
	$(PYTHON) -m pytest --doctest-modules mmlape -p no:cacheprovider
