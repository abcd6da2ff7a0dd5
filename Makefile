# Spool: one command per task.  `make run` and `make test` work on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
NODE_STAMP := node_modules/.installed-stamp
DEVPATH := .devpath
CHROMIUM ?= /usr/bin/chromium
PYTEST_ARGS ?=
RUNS ?= 3

.PHONY: install devpath hooks dist nftables run test test-fast test-long test-spark test-loaded lint typecheck bench bench-quick browser java promtool clean soak nemesis fuzz fabric-screenshot screenshots

install: $(STAMP) $(NODE_STAMP) devpath

# setup.py compiles the hot loops' Cython twins (server/**/*_c.pyx) into the editable
# install; without a C compiler it warns and the pure-Python twins run.
# npm first: the package maps the vendored front-end packages (uPlot, cytoscape) from
# node_modules/ (pyproject.toml's package-dir table).
$(STAMP): pyproject.toml setup.py $(wildcard server/*.pyx server/*.pxd server/*/*.pyx server/*/*.h server/*/*/*.pyx server/*/*/*.h) | $(NODE_STAMP)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

# The import names of pyproject.toml's package-dir table (`spool.server` is server/, ...)
# as links in $(DEVPATH)/: mypy and import-linter read the code there, and a second
# checkout (a git worktree) runs its own code with PYTHONPATH=$(DEVPATH):. and this venv.
# The editable install finds the same names through its own mapping.
devpath:
	@rm -rf $(DEVPATH) && $(PYTHON) -c 'import os, tomllib; \
	  layout = tomllib.load(open("pyproject.toml", "rb"))["tool"]["setuptools"]["package-dir"]; \
	  links = {os.path.join("$(DEVPATH)", *name.split(".")): folder for name, folder in layout.items()}; \
	  [os.makedirs(os.path.dirname(link), exist_ok=True) for link in links]; \
	  [os.symlink(os.path.relpath(folder, os.path.dirname(link)), link) for link, folder in links.items()]'

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

# Debian's Chromium for the Playwright tests (Playwright's own browser download cannot
# work on machines without internet; the tests launch /usr/bin/chromium).
browser:
	@if [ ! -x "$(CHROMIUM)" ]; then \
	  echo "installing chromium (Debian package)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; \
	fi

# A Java runtime for Spark (the pipeline's tests and `spool pipeline`): Debian's JRE when
# `java` is missing (Spark 4 needs Java 17 or newer).
java:
	@if ! command -v java >/dev/null 2>&1 && [ -z "$$JAVA_HOME" ]; then \
	  echo "installing a Java runtime for Spark (Debian package)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null; \
	fi

# promtool for the operations files' tests (server/ops: the alert rules are checked and
# unit-tested by it): Debian's prometheus package when it is missing.
promtool:
	@if ! command -v promtool >/dev/null 2>&1; then \
	  echo "installing promtool (Debian's prometheus package)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	fi

# nft (Debian's nftables) for the partition tests and the nemesis's partitions and packet
# loss, which run as root in network namespaces: without it they are skipped (the
# nemesis says so in its summary), so the suite installs it where it can.
nftables:
	@if ! command -v nft >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "installing nft (Debian's nftables package)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nftables >/dev/null; \
	fi

run: install
	$(PY) -m spool.server.cli serve $(ARGS)

# The wheels, in dist/: the compiled one for this platform and the pure-Python one
# (py3-none-any: any platform, the hot loops as Python). build/ goes in between, or the
# second would take the first one's extensions.
dist: install
	rm -rf dist build
	$(PY) -m pip wheel -q --no-deps --no-build-isolation -w dist .
	rm -rf build
	SPOOL_NO_EXTENSIONS=1 $(PY) -m pip wheel -q --no-deps --no-build-isolation -w dist .
	rm -rf build
	@ls dist

# The first commit under the commit rule (CONTRIBUTING.md "Commits"): `make lint` checks the
# message of every commit after it. The history before it is not rewritten.
COMMIT_RULE_BASE := 1ec2aca53bda7a49b5a72fb9b5438e9aa7003d4a

# The commit-msg hook runs the same check on each new message. `git rev-parse --git-path
# hooks` is the hooks folder every worktree of the repository shares; the hook runs the
# checker of the checkout it commits in (standard library only: any python3).
hooks:
	@hooks=$$(git rev-parse --git-path hooks) && mkdir -p "$$hooks" && \
	printf '%s\n' '#!/bin/sh' '# Installed by `make hooks`: the commit rule of CONTRIBUTING.md.' \
	  '[ -f tests/tools/commitmsg.py ] || exit 0' \
	  'exec python3 -m tests.tools.commitmsg --file "$$1"' > "$$hooks/commit-msg" && \
	chmod +x "$$hooks/commit-msg" && echo "installed $$hooks/commit-msg"

# The JavaScript client modules (static/spool-*.js, the npm package spool-broker-client)
# are type-checked from their JSDoc by the TypeScript compiler (tests/js/tsconfig.json);
# ESLint checks all of static/ (tests/js/eslint.config.js).
lint: $(STAMP) $(NODE_STAMP) devpath
	$(VENV)/bin/ruff check server web tests migrations
	$(VENV)/bin/ruff format --check server web tests migrations
	$(VENV)/bin/lint-imports
	node_modules/.bin/tsc --checkJs --noEmit -p tests/js/tsconfig.json
	node_modules/.bin/eslint --config tests/js/eslint.config.js static
	$(PY) -m tests.tools.commitmsg --range $(COMMIT_RULE_BASE)..HEAD

typecheck: $(STAMP) devpath
	$(VENV)/bin/mypy

# The codec tests run twice: with the compiled twins (the suite) and with the pure-Python
# ones (SPOOL_NO_EXTENSIONS=1), like aiohttp's CI with AIOHTTP_NO_EXTENSIONS.
CODEC_TESTS := tests/unit/protocol tests/unit/txlog/test_codec.py tests/unit/txlog/test_append_many.py \
	tests/unit/client/test_state.py tests/unit/test_wire_twins.py tests/unit/txlog/test_codec_twins.py \
	tests/unit/sow/test_stores.py tests/unit/sow/test_fileformat_twins.py

# The suite leaves out the `long` tests (repeated runs, minutes each; each has a short
# variant in the suite): `make test-long` runs them.
test: install browser java promtool nftables lint typecheck
	$(PY) -m pytest -m "not long" $(PYTEST_ARGS)
	SPOOL_NO_EXTENSIONS=1 $(PY) -m pytest -q -p no:cacheprovider $(CODEC_TESTS)

test-fast: install promtool
	$(PY) -m pytest -m "not browser and not slow and not faults and not spark" $(PYTEST_ARGS)

test-long: install browser java nftables
	$(PY) -m pytest -m long $(PYTEST_ARGS)

test-spark: install java
	$(PY) -m pytest -m spark $(PYTEST_ARGS)

# `make test` RUNS times in a row beside one busy process per core, stopping at the
# first failure: finds the tests that pass only when the machine is idle.
test-loaded: install browser java promtool nftables
	$(PY) -m tests.tools.loaded --runs $(RUNS) -- $(MAKE) test PYTEST_ARGS="$(PYTEST_ARGS)"

# docs/fabric.png: the fabric page of three real instances A -> B -> C, taken by its
# browser test (tests/browser/test_fabric_page.py) before it downgrades and kills.
fabric-screenshot: install browser
	SPOOL_FABRIC_SCREENSHOT=1 $(PY) -m pytest -q tests/browser/test_fabric_page.py

# The pictures of docs/dashboard.md: every page of the navigation at 1440x900
# (docs/pages/), and the pages with a test of their own (client, publish, topics).
screenshots: install browser
	SPOOL_SCREENSHOTS=1 $(PY) -m pytest -q tests/browser/test_dashboard_layout.py \
		tests/browser/test_client_page.py tests/browser/test_publish_page.py \
		tests/browser/test_topics_page.py

bench: install java
	$(PY) -m tests.bench $(ARGS)

bench-quick: install java
	$(PY) -m tests.bench --quick $(ARGS)

# The soak (tests/soak, docs/soak.md): clients against a broker that is killed, frozen and
# starved of disk (root: a tmpfs), then an oracle over the journals. ARGS="--minutes 10".
soak: install
	$(PY) -m tests.soak $(ARGS)

# The nemesis (tests/nemesis, docs/nemesis.md): 3-5 replicating instances under mixed faults
# (namespaces, partitions, a full tmpfs: root), histories checked against every journal.
# ARGS="--minutes 60 --seed 2 --instances 5"; ARGS="--scenario torn-tail".
nemesis: install nftables
	$(PY) -m tests.nemesis $(ARGS)

# Coverage-guided fuzzing (tests/fuzz, docs/fuzzing.md): each target 30 s by default.
# ARGS="--seconds 300 --target frame"; SPOOL_NO_EXTENSIONS=1 for the pure-Python build.
fuzz: install
	$(PY) -m tests.fuzz $(ARGS)

clean:
	rm -rf $(VENV) $(DEVPATH) node_modules .mypy_cache .ruff_cache .pytest_cache test-artifacts
