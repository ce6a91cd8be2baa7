# Two entry points a newcomer needs: `make synth` (install everything, synthesize every environment)
# and `make test` (install everything, run the whole suite). Both are offline after the install.
SHELL := /bin/bash
VENV := .venv
PYTHON := $(VENV)/bin/python
# checkov lives apart: its dependencies conflict with the project's pins (tests/constructs/test_checkov.py runs it).
CHECKOV_VENV := .venv-checkov
# Node 22 from package.json (the `node` package) comes first: the machine's Node 20 is end-of-life.
export PATH := $(CURDIR)/node_modules/.bin:$(CURDIR)/$(VENV)/bin:$(PATH)
export CDK_DISABLE_CLI_TELEMETRY := true
PYTEST_ARGS ?= -n 2
CDK ?= cdk
COMMA := ,
CDK_OUT ?= cdk.out
# `cdk synth --quiet` prints no template, yet ends with "Supply a stack id (Pipeline,
# cross-region-stack-444444444444:us-west-2) to display its template.": the CLI says so whenever its
# selection is not exactly one stack (CdkToolkit.synth in node_modules/aws-cdk/lib/cli/cdk-toolkit.js), and
# with no stack named it selects the app's top-level stacks, here the pipeline and CodePipeline's
# cross-region support stack for prod's region (none without the pipeline: "Supply a stack id ()"); no
# option lowers that message's level. Naming one stack would silence it, but would also skip the CLI's
# metadata checks of the other top-level stack and fail where no pipeline is synthesized. So the quiet
# synth merges the CLI's two streams onto stdout (it writes no template there; CI=true sends its messages
# there too), drops that one line and keeps the CLI's exit status; everything else passes through in order.
QUIET_SYNTH = set -o pipefail; $(CDK) synth --quiet $(1) 2>&1 | { grep --line-buffered -v '^Supply a stack id (' || true; }

.PHONY: setup synth test lint test-real-triton validate clean constraints rehearse-images rehearse-deploy peers docs \
	docs-build docs-reference browser compiler

# The serving worker's C fast path (container/neuron/serving/text_scan.c) for the checkout's Python (the venv's
# EXT_SUFFIX is python3's): the tests and benchmarks serve through it as the images do, which compile their own.
# Defined before the rules that name it: a rule's prerequisites expand when make reads it.
TEXT_SCAN := container/neuron/serving/_text_scan$(shell python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")

setup: .make/python .make/node .make/checkov .make/images .make/triton .make/docs docs/assets/vendor/iframe-worker-shim.js browser \
	compiler $(TEXT_SCAN)

.make/python: requirements.txt requirements-dev.txt constraints.txt
	@mkdir -p .make
	python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt -c constraints.txt
	@touch $@

$(TEXT_SCAN): .make/python container/neuron/serving/text_scan.c container/neuron/serving/build_text_scan.py | compiler
	$(PYTHON) container/neuron/serving/build_text_scan.py

.make/checkov: requirements-checkov.txt
	@mkdir -p .make
	python3 -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-checkov.txt
	@touch $@

.make/node: package.json package-lock.json
	@mkdir -p .make
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# The image build rehearsal's side environments, one per image requirements file (rehearsal/image_build.py).
.make/images: .make/python container/triton/requirements-export.txt container/neuron/requirements-inf1.txt container/neuron/requirements-inf2.txt container/loadtest/requirements.txt
	$(PYTHON) -m rehearsal.image_build --prepare
	@touch $@

# dev and staging: dev's serving images (staging's are the same assets) and staging's load-test image.
rehearse-images: setup
	rm -rf cdk.out.images
	@$(call QUIET_SYNTH,-c environments=dev$(COMMA)staging -o cdk.out.images)
	$(PYTHON) -m rehearsal.image_build --assembly cdk.out.images

validate: setup
	$(PYTHON) -m inferstack validate

# Not checkov: the pipeline's synth step runs `make synth` and has no use for it.
synth: .make/python .make/node
	@$(call QUIET_SYNTH,-o $(CDK_OUT))

test: setup lint
	$(PYTHON) -m pytest $(PYTEST_ARGS)

# ruff (ruff.toml: lint, import order, format) over the project, mypy (mypy.ini) over inferstack/.
lint: .make/python
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The README's deploy path with the real CDK CLI against moto's server (patched: rehearsal/):
# bootstrap, deploy every dev stack pinned to a release, smoke, promote, destroy; prints a report.
rehearse-deploy: setup
	$(PYTHON) -m rehearsal.cli_deploy

clean:
	rm -rf cdk.out cdk.out.images .make .venv-images $(TEXT_SCAN) $(CHECKOV_VENV) .venv-triton .venv-peers $(DOCS_VENV) site docs/assets/vendor \
	  .cache/docs

# Side environment of the real-Triton tier (pytest -m real_triton): tritonserver 2.51 from nvidia-pytriton,
# numpy < 2 for its Python backend stub, onnxruntime for the onnxruntime stand-in backend; plus the
# loopback-bind shim (the SageMaker front end binds 0.0.0.0). Kept out of .venv (numpy 2.x there).
TRITON_VENV := .venv-triton
.make/triton: requirements-triton.txt rehearsal/loopback_bind.c
	@mkdir -p .make
	rm -rf $(TRITON_VENV)
	python3 -m venv $(TRITON_VENV)
	$(TRITON_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-triton.txt
	cc -shared -fPIC -O2 -o $(TRITON_VENV)/lib/loopback_bind.so rehearsal/loopback_bind.c -ldl
	@touch $@

test-real-triton: setup .make/triton
	$(PYTHON) -m pytest -m real_triton $(PYTEST_ARGS)

# Refresh the transitive pins after changing requirements*.txt (torch stays pinned by its requirement).
constraints:
	@echo "# Transitive pins (pip freeze of a working environment); regenerate with: make constraints" > constraints.txt
	$(PYTHON) -m pip freeze --disable-pip-version-check | grep -v -E '^(torch==|-e )' >> constraints.txt

# benchmarks/peers.py's side environment (a developer tool, not part of setup or test): TorchServe 0.12 and
# tritonserver 2.51 (nvidia-pytriton, as the real-Triton tier) beside the serving app, with the project's torch.
# TorchServe's frontend is Java: a JRE from the system packages, installed here when missing (root, Debian).
PEERS_VENV := .venv-peers
.make/peers: benchmarks/requirements-peers.txt
	@mkdir -p .make
	@command -v java >/dev/null || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] \
	  && apt-get update -qq && apt-get install -y --no-install-recommends openjdk-17-jre-headless; } \
	  || { echo "TorchServe needs a JRE: apt-get install openjdk-17-jre-headless" >&2; exit 1; }
	rm -rf $(PEERS_VENV)
	python3 -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r benchmarks/requirements-peers.txt
	@touch $@

peers: .make/python .make/peers
	flock /tmp/cpu.lock $(PYTHON) benchmarks/peers.py

# The documentation site (mkdocs.yml, docs/): MkDocs with the Material theme and mkdocstrings, in a side
# environment like checkov's (their Markdown, Jinja and click pins are theirs, not the project's).
DOCS_VENV := .venv-docs
MKDOCS := NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs
# Material draws the ```mermaid diagrams with mermaid.js, which it would fetch from a CDN at view time; the site
# serves this pinned copy instead (mkdocs.yml extra_javascript), so diagrams render offline. `npm pack` fetches
# the package with npm's own integrity check; the hash pins the one file taken from it.
MERMAID_VERSION := 11.17.2
MERMAID_SHA256 := 581ed7d74bd9048d0e3a91363927d72ef22942d7722546b27f7cc29e35390eb8
.make/docs: requirements-docs.txt
	@mkdir -p .make .cache/docs docs/assets/vendor
	rm -rf $(DOCS_VENV)
	python3 -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-docs.txt
	cd .cache/docs && npm pack --silent mermaid@$(MERMAID_VERSION) > /dev/null
	tar -xzf .cache/docs/mermaid-$(MERMAID_VERSION).tgz -C .cache/docs package/dist/mermaid.min.js
	echo "$(MERMAID_SHA256)  .cache/docs/package/dist/mermaid.min.js" | sha256sum --check --quiet
	cp .cache/docs/package/dist/mermaid.min.js docs/assets/vendor/mermaid.min.js
	@touch $@

# The search on a page opened from disk (file://) runs in an iframe instead of a web worker, through this shim
# (mkdocs.yml extra.polyfills, for its offline plugin), which the site serves from its own copy as it does mermaid.
SEARCH_SHIM := docs/assets/vendor/iframe-worker-shim.js
IFRAME_WORKER_VERSION := 1.0.4
IFRAME_WORKER_SHA256 := e8e412dbcfea9b7e31b5ffa288d7b6035915e714c542f4176a0cdbe262fc9609
$(SEARCH_SHIM):
	@mkdir -p .cache/docs docs/assets/vendor
	cd .cache/docs && npm pack --silent iframe-worker@$(IFRAME_WORKER_VERSION) > /dev/null
	tar -xzf .cache/docs/iframe-worker-$(IFRAME_WORKER_VERSION).tgz -C .cache/docs package/shim/index.js
	echo "$(IFRAME_WORKER_SHA256)  .cache/docs/package/shim/index.js" | sha256sum --check --quiet
	cp .cache/docs/package/shim/index.js $@

# A real headless browser for tests/docs/test_site_browser.py: Debian's chromium and its chromedriver, driven
# by Selenium (requirements-docs.txt). Playwright and Puppeteer download their own browser builds, which this
# project cannot fetch; Debian's packages come through apt like any other dependency. Installed only when a
# binary is missing (apt-get needs root; CI runs as root), so a second `make setup` changes nothing.
browser:
	@if command -v chromium > /dev/null && command -v chromedriver > /dev/null; then :; else \
		echo "installing Debian's chromium and chromium-driver (the docs browser test)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver > /dev/null; \
	fi

# A C compiler for benchmarks/turnaround_floor.py's native floor server and load generator (benchmarks/floor/*.c),
# which its test builds too, and for the serving worker's extension (text_scan.c, which also needs Python's
# headers): Debian's gcc and python3-dev, each installed only when missing, as the browser above.
compiler:
	@if command -v cc > /dev/null; then :; else \
		echo "installing Debian's gcc (benchmarks/floor/*.c, container/neuron/serving/text_scan.c)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev > /dev/null; \
	fi
	@if [ -f "$$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")/Python.h" ]; then :; else \
		echo "installing Debian's python3-dev (container/neuron/serving/text_scan.c)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-dev > /dev/null; \
	fi

docs: .make/docs $(SEARCH_SHIM)
	$(MKDOCS) serve --dev-addr 127.0.0.1:8000

docs-build: .make/docs $(SEARCH_SHIM)
	$(MKDOCS) build --strict

# Rewrite the generated reference pages (docs/reference/) after changing the schema models, the CLI's
# arguments or the constructs' modules; tests/docs/ fails while a committed page is stale.
docs-reference: .make/python
	$(PYTHON) docs/gen/reference.py
