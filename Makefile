# Two entry points a newcomer needs: `make synth` (install everything, synthesize every environment)
# and `make test` (install everything, run the whole suite). Both are offline after the install.
SHELL := /bin/bash
VENV := .venv
PYTHON := $(VENV)/bin/python
# Node 22 from package.json (the `node` package) comes first: the machine's Node 20 is end-of-life.
export PATH := $(CURDIR)/node_modules/.bin:$(CURDIR)/$(VENV)/bin:$(PATH)
export CDK_DISABLE_CLI_TELEMETRY := true
PYTEST_ARGS ?= -n 2

.PHONY: setup synth test validate clean constraints rehearse-deploy
setup: .make/python .make/node

.make/python: requirements.txt requirements-dev.txt constraints.txt
	@mkdir -p .make
	python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt -c constraints.txt
	@touch $@

.make/node: package.json package-lock.json
	@mkdir -p .make
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

validate: setup
	$(PYTHON) -m inferstack validate

synth: setup
	cdk synth --quiet

test: setup
	$(PYTHON) -m pytest $(PYTEST_ARGS)

# The README's deploy path with the real CDK CLI against moto's server (patched: inferstack/rehearsal/):
# bootstrap, deploy every dev stack pinned to a release, smoke, promote, destroy; prints a report.
rehearse-deploy: setup
	$(PYTHON) -m inferstack.rehearsal.cli_deploy

clean:
	rm -rf cdk.out .make

# Refresh the transitive pins after changing requirements*.txt (torch stays pinned by its requirement).
constraints:
	@echo "# Transitive pins (pip freeze of a working environment); regenerate with: make constraints" > constraints.txt
	$(PYTHON) -m pip freeze --disable-pip-version-check | grep -v -E '^(torch==|-e )' >> constraints.txt
