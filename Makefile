# Course repository for the Trainium NKI assignment. `make setup` then `make test` on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip

.PHONY: setup test test-fast browser lint bench handouts submission clean grade

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e ".[dev,ray]"
	$(PY) -m nkisim install-fallback
	touch $@

# The whole suite here; in the student release (`make release`), whose tests/ holds only the installation check
# (tests/test_setup_check.py), the same command checks the installation and the tools in under a minute and never
# reads the student's kernels (`make grade` does).  Browser tests of the HTML profile need a Chromium (Debian:
# apt-get install chromium; `make browser` as root); without one they are skipped with a loud reason in the
# summary.  loadgroup keeps them on one worker.
test: setup
	$(PY) -m pytest -q -n 2 --dist loadgroup

# The inner loop: the suite without the tests marked `slow` (sandboxed full gradings, 224x224 convolutions, tests
# that wait out a timeout, release, Ray and browser tests), about a sixth of its time; CI runs `make test`.
test-fast: setup
	$(PY) -m pytest -q -n 2 --dist loadgroup -m "not slow"

# Installs Debian's Chromium for the browser tests when it is missing (needs root and apt-get).
browser:
	@if command -v chromium >/dev/null 2>&1; then echo "chromium: $$(command -v chromium)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
	  && echo "installed chromium: $$(command -v chromium)"; \
	else echo "WARNING: no chromium and cannot install it (not root or no apt-get): browser tests will be skipped"; fi

lint: setup
	$(VENV)/bin/ruff check nkisim nkibench grader part1 part2 tests handouts $(wildcard tools staff)

bench: setup
	$(PY) -m nkisim.bench

# Regenerates the handout's figures (matplotlib; the profile timeline runs a kernel on nkisim; the HTML-profile
# screenshots need Chromium, see `make browser`).
handouts: setup
	$(PY) handouts/figures/make_figures.py

# What students upload: part1/kernels.py and part2/conv2d.py, packed as asst4.tar.gz.
SUBMISSION_FILES := part1/kernels.py part2/conv2d.py
submission:
	@for f in $(SUBMISSION_FILES); do test -f $$f || { echo "missing $$f" >&2; exit 1; }; done
	tar -czhf asst4.tar.gz.tmp $(SUBMISSION_FILES) && mv asst4.tar.gz.tmp asst4.tar.gz
	@echo "Wrote asst4.tar.gz:"; tar -tzf asst4.tar.gz

# Grades your own work exactly as Gradescope does (sandboxed, nkisim, trn2): a table of tests and points,
# reports in grader-results/.  Extra options: make grade GRADE_ARGS="--only 'part1.*'".
GRADE_ARGS ?=
grade: setup
	$(PY) -m grader grade . --out grader-results $(GRADE_ARGS)

# release: staff begin (tools/release.py drops these targets from the student repository, which lacks their inputs)
.PHONY: gradescope release
# autograder.zip for Gradescope (setup.sh + run_autograder + the project with nkisim and the grader).
gradescope: setup
	$(PY) -m grader gradescope --out autograder.zip

# The student repository (release/asst4-trainium/ and release/asst4-trainium.tar.gz) without staff files
# (grader/reference/, editions/, .release-exclude and its paths, this staff block), with README.student.md as its
# README.  API=nki (the default: the current `import nki` API, Neuron SDK 2.30+) or API=legacy (neuronxcc.nki,
# SDK <= 2.29: the editions/legacy/ starters, into release/asst4-trainium-legacy/); the handouts keep that
# edition's api blocks.
API ?= nki
release:
	$(PYTHON) tools/release.py --out release --api $(API)
# release: staff end

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .hypothesis release out asst4.tar.gz autograder.zip
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
