# reverb_py: the two commands a user needs are `make run` and `make test`.
#
#   make test     create .venv, build the Cython modules, run the suite compiled, then pure
#   make test-debug  the integration tests in asyncio debug mode
#   make run      start the replay server daemon on localhost with the default table
#   make build    (re)build the compiled modules in place
#   make debug    build with bounds checks and line tracing, run the parity tests on it
#   make protos   regenerate reverb_py/_proto/*_pb2.py from protos/ (grpcio-tools)
#   make bench    run the benchmarks in benchmarks/ and write their JSON results
#   make interop  test against the real dm-reverb 0.14 (installed into .venv-reverb)

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# dm-reverb 0.14 pins TensorFlow 2.15, which needs Python 3.9-3.11. It lives in its own
# environment and is never a dependency of reverb_py.
REVERB_PYTHON ?= python3.11
REVERB_VENV ?= .venv-reverb

.PHONY: test test-debug run build debug protos bench interop clean

$(VENV)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "setuptools>=68" wheel "Cython>=3.0"
	$(PY) -m pip install --quiet --no-build-isolation -e '.[test,dev]'
	touch $@

build: $(VENV)/.installed
	$(PY) setup.py --quiet build_ext --inplace

test: build
	REVERB_PY_REQUIRE_SPEEDUPS=1 $(PY) -m pytest $(PYTEST_ARGS)
	REVERB_PY_NO_EXTENSIONS=1 $(PY) -m pytest $(PYTEST_ARGS)

# The integration tests in asyncio debug mode. Not part of `make test`: in a fresh clone
# this run was seen to grow one process past the machine's memory (not yet understood).
test-debug: build
	PYTHONASYNCIODEBUG=1 $(PY) -m pytest tests/integration $(PYTEST_ARGS)

debug: $(VENV)/.installed
	REVERB_PY_DEBUG_BUILD=1 $(PY) setup.py --quiet build_ext --inplace --force
	REVERB_PY_REQUIRE_SPEEDUPS=1 $(PY) -m pytest tests/parity tests/unit $(PYTEST_ARGS)
	$(PY) setup.py --quiet build_ext --inplace --force

run: build
	$(PY) -m reverb_py.server

# The generated modules are committed; this target reproduces them from protos/ with the
# protoc bundled in grpcio-tools (see protos/README.md).
protos: $(VENV)/.installed
	$(PY) -m grpc_tools.protoc -Iprotos --python_out=. --pyi_out=. \
		$$(cd protos && find reverb_py -name '*.proto' | sed 's|^|protos/|')

bench: build
	$(PY) -m pip install --quiet --no-build-isolation -e '.[bench]'
	$(PY) -m benchmarks.structures
	$(PY) -m benchmarks.table
	$(PY) -m benchmarks.e2e

$(REVERB_VENV)/.installed:
	$(REVERB_PYTHON) -m venv $(REVERB_VENV)
	$(REVERB_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(REVERB_VENV)/bin/python -m pip install --quiet 'dm-reverb[tensorflow]==0.14.0'
	touch $@

interop: build $(REVERB_VENV)/.installed
	REVERB_PY_DM_REVERB_PYTHON=$(abspath $(REVERB_VENV))/bin/python \
		$(PY) -m pytest tests/interop -p no:cacheprovider $(PYTEST_ARGS)

clean:
	rm -rf build $(VENV) $(REVERB_VENV) *.egg-info _speedups/*.cpp _speedups/*.html \
		reverb_py/_writer/*.cpp reverb_py/_writer/*.html
	find reverb_py -name '*.so' -delete -o -name '*.pyd' -delete
