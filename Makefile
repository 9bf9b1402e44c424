# reverb_py: the two commands a user needs are `make run` and `make test`.
#
#   make test     create .venv, lint and type-check, build the Cython modules, run the
#                 suite compiled, then pure
#   make lint     ruff check and ruff format --check
#   make typecheck  mypy --strict over reverb_py
#   make test-debug  the integration tests in asyncio debug mode
#   make run      start the replay server daemon on localhost with the default table
#   make build    (re)build the compiled modules in place
#   make debug    build with bounds checks and line tracing, run the parity tests on it
#   make protos   regenerate reverb_py/_proto/*_pb2.py from protos/ (grpcio-tools)
#   make bench    run the benchmarks in benchmarks/ and write their JSON results
#   make interop  test against the real dm-reverb 0.14 (installed into .venv-reverb)
#   make test-packaging  build the sdist and a wheel, install them into fresh venvs
#   make test-browser  the status page in headless Chromium (needs `chromium`)
#   make fuzz     the hostile-input suite with 1,000 cases per test (minutes)
#   make soak     actors and a learner on one server for 3 minutes; memory must stay flat
#   make test-frameworks  the TensorFlow, PyTorch and JAX tests (installed into
#                 .venv-frameworks), compiled, then pure
#   make test-ray  servers as Ray actors on a local Ray cluster (installed into .venv-ray),
#                 compiled, then pure
#   make test-oldest  the suite on the oldest versions of the dependencies (.venv-oldest)
#   make test-pythons  the suite, compiled, on Python 3.10 and 3.13 (.venv-py3.10, .venv-py3.13)
#   make test-beside-reverb  pip-install reverb_py beside TensorFlow 2.15 and dm-reverb 0.14
#   make test-beside-tf-agents  pip resolves reverb_py with TF-Agents 0.19 and TensorFlow 2.15
#   make test-adoption  TF-Agents 0.19 and Acme 0.4 on the wheel through `import reverb`
#                 (.venv-adoption); test-adoption-upstream adds their own Reverb tests
#   make docs     the documentation site (MkDocs, strict) into build/site (.venv-docs)

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# Parallel compile jobs for `make build`.
JOBS ?= $(shell nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)
# dm-reverb 0.14 pins TensorFlow 2.15, which needs Python 3.9-3.11. It lives in its own
# environment and is never a dependency of reverb_py.
REVERB_PYTHON ?= python3.11
REVERB_VENV ?= .venv-reverb
# TensorFlow, PyTorch (the CPU build) and JAX, pinned together: optional extras of
# reverb_py, tested in their own environment.
FRAMEWORKS_VENV ?= .venv-frameworks
FRAMEWORKS_PY := $(FRAMEWORKS_VENV)/bin/python
FRAMEWORKS ?= tensorflow==2.21.0 torch==2.13.0 tensordict==0.15.3 jax==0.10.2 jaxlib==0.10.2

.PHONY: test lint typecheck test-debug test-packaging test-frameworks test-exit test-ray test-oldest test-beside-reverb test-beside-tf-agents test-adoption test-adoption-upstream adoption-dm-list test-pythons \
	fuzz soak run build debug protos bench interop docs clean

# An editable install leaves out reverb_py-as-reverb.pth (BuildPy in setup.py puts it in
# wheels and sdist installs): copied into each editable environment, so that processes
# started there honour REVERB_PY_AS_REVERB as in a user's installation.
define as_reverb_pth
	cp reverb_py/_as_reverb.pth "$$($(1) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/reverb_py-as-reverb.pth"
endef

# The editable install compiles nothing (REVERB_PY_NO_EXTENSIONS=1): `build` compiles
# every module once, in place, where the editable package imports them from.
$(VENV)/.installed: pyproject.toml setup.py
	@echo "reverb_py: creating $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@echo "reverb_py: installing pip, setuptools and Cython into $(VENV)"
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "setuptools>=77" wheel "Cython>=3.0"
	@echo "reverb_py: installing reverb_py (editable) and its dependencies into $(VENV)"
	REVERB_PY_NO_EXTENSIONS=1 $(PY) -m pip install --quiet --no-build-isolation -e '.[test,dev]'
	$(call as_reverb_pth,$(PY))
	touch $@

# Incremental: only modules whose sources changed are cythonized and compiled again.
build: $(VENV)/.installed
	@echo "reverb_py: building the compiled modules ($(JOBS) jobs; about 2 minutes from scratch)"
	$(PY) setup.py --quiet build_ext --inplace --parallel $(JOBS)
	@$(PY) -c "import reverb_py; print('reverb_py: implementation', reverb_py.IMPLEMENTATION)"

# ruff (pinned in the dev extra): lint rules and formatting, as configured in pyproject.toml.
lint: $(VENV)/.installed
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# mypy --strict over the package (settings in setup.cfg).
typecheck: $(VENV)/.installed
	$(PY) -m mypy

test: lint typecheck build
	REVERB_PY_REQUIRE_SPEEDUPS=1 $(PY) -m pytest -m "not packaging" $(PYTEST_ARGS)
	REVERB_PY_NO_EXTENSIONS=1 $(PY) -m pytest -m "not packaging" $(PYTEST_ARGS)

# Builds the sdist and a manylinux wheel and installs them into fresh venvs (several
# minutes: full compiles). Not part of `make test`; CI runs it.
test-packaging: $(VENV)/.installed
	REVERB_PY_PACKAGING_TESTS=1 $(PY) -m pytest tests/packaging -m packaging -p no:cacheprovider $(PYTEST_ARGS)

# The compiled modules built in place by `build` serve this environment too (same Python).
$(FRAMEWORKS_VENV)/.installed: pyproject.toml setup.py
	@echo "reverb_py: creating $(FRAMEWORKS_VENV) with $(FRAMEWORKS)"
	$(PYTHON) -m venv $(FRAMEWORKS_VENV)
	$(FRAMEWORKS_PY) -m pip install --quiet --upgrade pip
	$(FRAMEWORKS_PY) -m pip install --quiet "setuptools>=77" wheel "Cython>=3.0" $(FRAMEWORKS)
	REVERB_PY_NO_EXTENSIONS=1 $(FRAMEWORKS_PY) -m pip install --quiet --no-build-isolation -e '.[test]'
	$(call as_reverb_pth,$(FRAMEWORKS_PY))
	touch $@

test-frameworks: build $(FRAMEWORKS_VENV)/.installed
	REVERB_PY_FRAMEWORKS_TESTS=1 REVERB_PY_REQUIRE_SPEEDUPS=1 $(FRAMEWORKS_PY) -m pytest tests/frameworks tests/docs/test_readme_and_examples.py -m frameworks -p no:cacheprovider $(PYTEST_ARGS)
	REVERB_PY_FRAMEWORKS_TESTS=1 REVERB_PY_NO_EXTENSIONS=1 $(FRAMEWORKS_PY) -m pytest tests/frameworks tests/docs/test_readme_and_examples.py -m frameworks -p no:cacheprovider $(PYTEST_ARGS)

# A program whose tf.data pipeline still reads reverb_py datasets (and an in-process
# server) when it ends, run 50 times: every run must end by itself, logging nothing.
test-exit: build $(FRAMEWORKS_VENV)/.installed
	REVERB_PY_EXIT_RUNS=50 REVERB_PY_FRAMEWORKS_TESTS=1 REVERB_PY_REQUIRE_SPEEDUPS=1 \
		$(FRAMEWORKS_PY) -m pytest tests/frameworks/test_exit.py -m frameworks \
		-p no:cacheprovider $(PYTEST_ARGS)

# Ray, an optional extra of reverb_py (`reverb_py.ray`), in its own environment; the
# compiled modules built in place by `build` serve it too (same Python).
RAY_VENV ?= .venv-ray
RAY_PY := $(RAY_VENV)/bin/python
RAY ?= ray==2.60.0
$(RAY_VENV)/.installed: pyproject.toml setup.py
	@echo "reverb_py: creating $(RAY_VENV) with $(RAY)"
	$(PYTHON) -m venv $(RAY_VENV)
	$(RAY_PY) -m pip install --quiet --upgrade pip
	$(RAY_PY) -m pip install --quiet "setuptools>=77" wheel "Cython>=3.0" $(RAY)
	REVERB_PY_NO_EXTENSIONS=1 $(RAY_PY) -m pip install --quiet --no-build-isolation -e '.[test]'
	$(call as_reverb_pth,$(RAY_PY))
	touch $@

test-ray: build $(RAY_VENV)/.installed
	REVERB_PY_RAY_TESTS=1 REVERB_PY_REQUIRE_SPEEDUPS=1 $(RAY_PY) -m pytest tests/ray -m ray -p no:cacheprovider $(PYTEST_ARGS)
	REVERB_PY_RAY_TESTS=1 REVERB_PY_NO_EXTENSIONS=1 $(RAY_PY) -m pytest tests/ray -m ray -p no:cacheprovider $(PYTEST_ARGS)

# The oldest version of each dependency reverb_py supports (the floors in pyproject.toml):
# the suite in its own environment, compiled (the modules `build` compiled in place serve
# it: same Python), then pure. The environment is made again when pyproject.toml changes
# (where the floors are); the first step checks that it holds these pins.
OLDEST_VENV ?= .venv-oldest
OLDEST ?= protobuf==4.21.6 grpcio==1.65.1 numpy==1.24.0 prometheus-client==0.17.0 \
	cramjam==2.7.0 google-crc32c==1.5.0 uvloop==0.19.0
$(OLDEST_VENV)/.installed: pyproject.toml setup.py
	@echo "reverb_py: creating $(OLDEST_VENV) with $(OLDEST)"
	$(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(OLDEST_VENV)/bin/python -m pip install --quiet "setuptools>=77" wheel "Cython>=3.0"
	REVERB_PY_NO_EXTENSIONS=1 $(OLDEST_VENV)/bin/python -m pip install --quiet --no-build-isolation \
		-e '.[test]' $(OLDEST)
	$(call as_reverb_pth,$(OLDEST_VENV)/bin/python)
	touch $@

test-oldest: build $(OLDEST_VENV)/.installed
	$(OLDEST_VENV)/bin/python -c "import sys; from importlib.metadata import version; \
		pins = dict(p.split('==') for p in sys.argv[1:]); \
		found = {n: version(n) for n in pins}; print('reverb_py: running on', found); \
		assert found == pins, (found, pins)" $(OLDEST)
	REVERB_PY_REQUIRE_SPEEDUPS=1 $(OLDEST_VENV)/bin/python -m pytest -m "not packaging" -p no:cacheprovider $(PYTEST_ARGS)
	REVERB_PY_NO_EXTENSIONS=1 $(OLDEST_VENV)/bin/python -m pytest -m "not packaging" -p no:cacheprovider $(PYTEST_ARGS)

# The oldest and newest Python the machine has beside $(PYTHON) (`.ci/find-python` looks on
# PATH, then among pyenv's versions): each gets its own environment (.venv-py3.10, ...)
# and compiled modules built in place for it (a suffix per interpreter, beside the
# others), and runs the suite compiled, the README and docs blocks included.
PYTHON_VERSIONS ?= 3.10 3.13
.PRECIOUS: .venv-py%/.installed
.venv-py%/.installed: pyproject.toml setup.py
	@echo "reverb_py: creating .venv-py$* with $$(.ci/find-python $*)"
	"$$(.ci/find-python $*)" -m venv .venv-py$*
	.venv-py$*/bin/python -m pip install --quiet --upgrade pip
	.venv-py$*/bin/python -m pip install --quiet "setuptools>=77" wheel "Cython>=3.0"
	REVERB_PY_NO_EXTENSIONS=1 .venv-py$*/bin/python -m pip install --quiet --no-build-isolation -e '.[test]'
	$(call as_reverb_pth,.venv-py$*/bin/python)
	touch $@

test-python-%: .venv-py%/.installed
	.venv-py$*/bin/python setup.py --quiet build_ext --inplace --parallel $(JOBS)
	REVERB_PY_REQUIRE_SPEEDUPS=1 .venv-py$*/bin/python -m pytest -m "not packaging" -p no:cacheprovider $(PYTEST_ARGS)

test-pythons: $(addprefix test-python-,$(PYTHON_VERSIONS))

# reverb_py installed with pip where Reverb users are: beside TensorFlow 2.15.1 and
# dm-reverb 0.14.0 (and TensorFlow's protobuf < 5). The environment layers over
# $(REVERB_VENV): a .pth file adds its site-packages and nothing is installed there, so
# pip resolves reverb_py's dependencies against what it holds without fetching
# TensorFlow again. The wheel is the pure one (nothing compiled twice).
BESIDE_VENV ?= .venv-beside-reverb
test-beside-reverb: $(VENV)/.installed $(REVERB_VENV)/.installed
	rm -rf $(BESIDE_VENV) build/beside-reverb
	REVERB_PY_NO_EXTENSIONS=1 $(PY) -m pip wheel --quiet --no-deps --no-build-isolation \
		-w build/beside-reverb .
	$(REVERB_PYTHON) -m venv $(BESIDE_VENV)
	$(abspath $(REVERB_VENV))/bin/python -c "import sysconfig; \
		print('import site; site.addsitedir(%r)' % sysconfig.get_paths()['purelib'])" \
		> "$$($(BESIDE_VENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/_beside_dm_reverb.pth"
	$(BESIDE_VENV)/bin/python -m pip install --quiet build/beside-reverb/reverb_py-*.whl
	$(BESIDE_VENV)/bin/python -m pip check
	cd build && $(abspath $(BESIDE_VENV))/bin/python $(abspath tests/packaging/beside_dm_reverb.py)

# pip resolves reverb_py (the pure wheel of this checkout) together with TF-Agents 0.19.0
# and TensorFlow 2.15.1 in one step, in a fresh $(REVERB_PYTHON) environment: TF-Agents
# pins typing-extensions 4.5.0 (which grpcio 1.75 and later refuse) and TensorFlow 2.15
# protobuf < 5 and numpy < 2. A dry run: nothing is installed, so TensorFlow is not
# downloaded; pip fails with ResolutionImpossible where a floor is too high.
TF_AGENTS_PINS ?= tf-agents==0.19.0 tensorflow==2.15.1
test-beside-tf-agents: $(VENV)/.installed
	rm -rf build/beside-tf-agents
	REVERB_PY_NO_EXTENSIONS=1 $(PY) -m pip wheel --quiet --no-deps --no-build-isolation \
		-w build/beside-tf-agents .
	$(REVERB_PYTHON) -m venv build/beside-tf-agents/venv
	build/beside-tf-agents/venv/bin/python -m pip install --quiet --upgrade pip
	build/beside-tf-agents/venv/bin/python -m pip install --dry-run --quiet \
		--report build/beside-tf-agents/report.json $(TF_AGENTS_PINS) build/beside-tf-agents/reverb_py-*.whl
	@$(PY) -c "import json, re, sys; \
		found = {re.sub('[-_.]+', '-', i['metadata']['name']).lower(): i['metadata']['version'] \
			for i in json.load(open(sys.argv[1]))['install']}; \
		print('reverb_py: resolves beside $(TF_AGENTS_PINS) with', \
			{n: found[n] for n in ('grpcio', 'protobuf', 'numpy', 'typing-extensions')})" \
		build/beside-tf-agents/report.json

# TF-Agents 0.19 and Acme 0.4 running unchanged on reverb_py through `import reverb`. A
# fresh $(REVERB_PYTHON) environment gets the pure wheel of this checkout with TF-Agents
# and TensorFlow in one pip command (the proof that they resolve together), then what
# TF-Agents' and Acme's code and tests import that TF-Agents does not pull in, then
# dm-acme without its stale pins (dm-launchpad, TensorFlow 2.8); never dm-reverb. Then:
# tests/adoption (TF-Agents and Acme programs switched to reverb_py as users would).
# test-adoption-upstream then runs TF-Agents' and Acme's own Reverb tests from
# site-packages with REVERB_PY_AS_REVERB=1, each test that passes on dm-reverb 0.14
# (tests/adoption/upstream/passing_on_dm_reverb.txt, made by `make adoption-dm-list`)
# required to pass (JUnit report build/adoption/upstream.xml).
ADOPTION_VENV ?= .venv-adoption
ADOPTION_PY := $(ADOPTION_VENV)/bin/python
# jax 0.4.13: Acme 0.4's adders use jax.numpy.DeviceArray (gone from later releases).
ADOPTION_EXTRAS ?= dm-env==1.6 rlds==0.1.8 mock==5.2.0 portpicker==1.6.0 \
	jax==0.4.13 jaxlib==0.4.13 scipy==1.17.1 \
	pytest==8.4.2 pytest-asyncio==1.1.0 pytest-timeout==2.4.0
# Acme 0.4.0 is the last release; 42 of its 45 adder tests fail on dm-reverb 0.14 as on
# reverb_py (they pass get_signature_timeout_ms to Client.trajectory_writer, dropped in
# Reverb 0.10), so the list holds its other 3.
ADOPTION_ACME ?= dm-acme==0.4.0
ADOPTION_LIST := tests/adoption/upstream/passing_on_dm_reverb.txt
# pip check, less dm-acme's dm-launchpad (no Python 3.11 release; tests/adoption/stand_ins).
define adoption_pip_check
	mkdir -p $(dir $(2))
	$(1) -m pip check > $(2) || true
	@! grep -v -e '^dm-acme 0.4.0 requires dm-launchpad' -e '^No broken requirements' $(2)
endef

test-adoption: $(VENV)/.installed
	rm -rf $(ADOPTION_VENV) build/adoption
	REVERB_PY_NO_EXTENSIONS=1 $(PY) -m pip wheel --quiet --no-deps --no-build-isolation \
		-w build/adoption .
	$(REVERB_PYTHON) -m venv $(ADOPTION_VENV)
	$(ADOPTION_PY) -m pip install --quiet --upgrade pip
	$(ADOPTION_PY) -m pip install --quiet $(TF_AGENTS_PINS) build/adoption/reverb_py-*.whl
	$(ADOPTION_PY) -m pip install --quiet $(ADOPTION_EXTRAS)
	$(ADOPTION_PY) -m pip install --quiet --no-deps $(ADOPTION_ACME)
	@! $(ADOPTION_PY) -m pip show --quiet dm-reverb 2>/dev/null || \
		{ echo "reverb_py: dm-reverb got into $(ADOPTION_VENV)"; exit 1; }
	$(call adoption_pip_check,$(ADOPTION_PY),build/adoption/pip-check.txt)
	REVERB_PY_ADOPTION_TESTS=1 $(ADOPTION_PY) -m pytest tests/adoption -m adoption \
		-p no:cacheprovider $(PYTEST_ARGS)

# TF-Agents' and Acme's own Reverb tests in the environment test-adoption made (in CI).
test-adoption-upstream: test-adoption
	REVERB_PY_AS_REVERB=1 $(ADOPTION_PY) tests/adoption/upstream/run.py \
		--junit build/adoption/upstream.xml --expect $(ADOPTION_LIST)

# The list of TF-Agents' and Acme's tests that pass on dm-reverb 0.14.0: the same
# packages with dm-reverb in place of reverb_py (not part of CI; review the diff).
ADOPTION_DM_VENV ?= .venv-adoption-dm
adoption-dm-list:
	rm -rf $(ADOPTION_DM_VENV)
	$(REVERB_PYTHON) -m venv $(ADOPTION_DM_VENV)
	$(ADOPTION_DM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(ADOPTION_DM_VENV)/bin/python -m pip install --quiet $(TF_AGENTS_PINS) dm-reverb==0.14.0
	$(ADOPTION_DM_VENV)/bin/python -m pip install --quiet $(ADOPTION_EXTRAS)
	$(ADOPTION_DM_VENV)/bin/python -m pip install --quiet --no-deps $(ADOPTION_ACME)
	$(call adoption_pip_check,$(ADOPTION_DM_VENV)/bin/python,build/adoption-dm-pip-check.txt)
	$(ADOPTION_DM_VENV)/bin/python tests/adoption/upstream/run.py \
		--junit build/adoption-dm-reverb.xml --record $(ADOPTION_LIST)

# The status page rendered by headless Chromium (Debian's `chromium`; CI installs it).
test-browser: build
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
		{ echo "reverb_py: make test-browser needs chromium (apt-get install chromium)"; exit 1; }
	REVERB_PY_BROWSER_TESTS=1 $(PY) -m pytest tests/browser -p no:cacheprovider $(PYTEST_ARGS)

# Longer runs of the hostile-input suite and a soak; outside `make test` and CI.
fuzz: build
	REVERB_PY_FUZZ_EXAMPLES=1000 REVERB_PY_REQUIRE_SPEEDUPS=1 $(PY) -m pytest tests/robustness -o timeout=1800 -p no:cacheprovider $(PYTEST_ARGS)
	REVERB_PY_FUZZ_EXAMPLES=1000 REVERB_PY_NO_EXTENSIONS=1 $(PY) -m pytest tests/robustness -o timeout=1800 -p no:cacheprovider $(PYTEST_ARGS)

soak: build
	$(PY) -m benchmarks.soak --seconds 180

# The integration tests in asyncio debug mode. Not part of `make test`: in a fresh clone
# this run was seen to grow one process past the machine's memory (not yet understood).
test-debug: build
	PYTHONASYNCIODEBUG=1 $(PY) -m pytest tests/integration $(PYTEST_ARGS)

debug: $(VENV)/.installed
	REVERB_PY_DEBUG_BUILD=1 $(PY) setup.py --quiet build_ext --inplace --force --parallel $(JOBS)
	REVERB_PY_REQUIRE_SPEEDUPS=1 $(PY) -m pytest tests/parity tests/unit $(PYTEST_ARGS)
	$(PY) setup.py --quiet build_ext --inplace --force --parallel $(JOBS)

run: build
	$(PY) -m reverb_py.server

# The generated modules are committed; this target reproduces them from protos/ with the
# protoc bundled in grpcio-tools, then removes the runtime version gate so they import on
# protobuf 4.21 and later (see protos/README.md).
protos: $(VENV)/.installed
	$(PY) -m grpc_tools.protoc -Iprotos --python_out=. --pyi_out=. \
		$$(cd protos && find reverb_py -name '*.proto' | sed 's|^|protos/|')
	$(PY) protos/strip_version_gate.py reverb_py/_proto/*_pb2.py

bench: build
	$(PY) -m pip install --quiet --no-build-isolation -e '.[bench]'
	$(PY) -m benchmarks.structures
	$(PY) -m benchmarks.table
	$(PY) -m benchmarks.e2e

# The documentation site (mkdocs.yml, pages under docs/), built strictly (a warning fails)
# into build/site by MkDocs in its own environment (.venv-docs, the `docs` extra). The API
# reference is read from the sources (griffe's static analysis): no framework is installed.
DOCS_VENV ?= .venv-docs
DOCS_PY := $(DOCS_VENV)/bin/python
$(DOCS_VENV)/.installed: pyproject.toml setup.py
	@echo "reverb_py: creating $(DOCS_VENV) with the docs extra"
	$(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_PY) -m pip install --quiet --upgrade pip
	$(DOCS_PY) -m pip install --quiet "setuptools>=77" wheel "Cython>=3.0"
	REVERB_PY_NO_EXTENSIONS=1 $(DOCS_PY) -m pip install --quiet --no-build-isolation -e '.[docs]'
	touch $@

docs: $(DOCS_VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(DOCS_PY) -m mkdocs build --strict --site-dir build/site

$(REVERB_VENV)/.installed:
	$(REVERB_PYTHON) -m venv $(REVERB_VENV)
	$(REVERB_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(REVERB_VENV)/bin/python -m pip install --quiet 'dm-reverb[tensorflow]==0.14.0'
	touch $@

interop: build $(REVERB_VENV)/.installed
	REVERB_PY_DM_REVERB_PYTHON=$(abspath $(REVERB_VENV))/bin/python \
		$(PY) -m pytest tests/interop -p no:cacheprovider $(PYTEST_ARGS)

clean:
	rm -rf build dist $(VENV) .venv-py* $(REVERB_VENV) $(FRAMEWORKS_VENV) $(RAY_VENV) $(OLDEST_VENV) $(BESIDE_VENV) $(DOCS_VENV) $(ADOPTION_VENV) $(ADOPTION_DM_VENV) *.egg-info _speedups/*.cpp _speedups/*.html \
		reverb_py/_writer/*.cpp reverb_py/_writer/*.html
	find reverb_py -name '*.so' -delete -o -name '*.pyd' -delete
