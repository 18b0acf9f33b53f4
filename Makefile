# The targets are the commands README.md shows. Each installs what it needs into .venv.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install install-demo wheel wheel-check test test-fast lint docs reference bench demo clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'

## install-demo: the package alone (no dev extras): what `mailguard demo` needs.
install-demo: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .

## wheel: the distribution as a wheel, dist/celery_mailguard-<version>-py3-none-any.whl (what
## `pip install dist/celery_mailguard-*.whl` installs while the distribution is not on PyPI).
wheel: $(BIN)/python
	rm -f dist/celery_mailguard-*.whl
	$(BIN)/python -m pip wheel --quiet --no-deps --wheel-dir dist .

## wheel-check: that wheel installed into a fresh virtualenv outside the checkout, and the
## `mailguard` command run from it (.ci/wheel-check; CI runs it before the tests).
wheel-check:
	@PY=$(PY) sh .ci/wheel-check

## test: the whole test suite (starts its own redis-server; installs it with apt-get if missing),
## then a branch-coverage report of mailer/ and workers/ (files at 100 % are not listed).
## Four pytest processes, each test file in one of them (its module-scoped servers once):
## most tests wait on real servers and workers, so this is ~3x faster even on 2 cores.
## `make test PYTEST_JOBS=0` runs it in one process.
PYTEST_JOBS ?= 4
test: install
	@sh .ci/install-redis
	$(BIN)/python -m pytest -n $(PYTEST_JOBS) --dist loadfile --durations=25 --cov --cov-report=term $(PYTEST_ARGS)

## test-fast: the tests that need no server (`pytest -m "not server"`): no redis-server, RabbitMQ,
## SMTP server or Celery worker is started; a test that starts one without the `server` mark
## fails (tests/server_marks.py), so this run passing proves it.
test-fast: install
	$(BIN)/python -m pytest -m "not server" -n $(PYTEST_JOBS) --dist loadfile $(PYTEST_ARGS)

## flake: the reliability tests (every crash point, the broker restarts, the drain's spacing,
## chaos, a hold's slow start, every worker killed with parked mails) and every test of a time
## promise on real workers (the newsletter's and the priorities' code mails and pacing, late
## runs and a stopped worker's mails, the order streams' spacing, the README walk's slots, a
## new policy within a second, the demo's slots, anvil's windows) FLAKE_RUNS times in a row
## (default 20) while a busy loop per core keeps the CPU busy; prints "N passed, M failed" and
## fails if any run failed (.ci/flake keeps each failed run's log).
FLAKE_RUNS ?= 20
FLAKE_TESTS ?= tests/reliability/crash \
	tests/reliability/test_faults_crash.py::test_a_broker_restart_with_countdown_held_mails \
	tests/reliability/test_faults_crash.py::test_broker_kills_mid_traffic_lose_nothing_and_send_nothing_twice \
	tests/reliability/test_faults_crash.py::test_a_killed_worker_s_countdowns_are_sent_on_time \
	tests/reliability/test_drain_worker.py tests/reliability/test_chaos.py \
	tests/reliability/test_chaos_smtp.py \
	tests/reliability/test_faults_clock.py \
	tests/workers/celery/test_pace_worker.py \
	tests/workers/celery/test_parking.py::test_every_worker_killed_with_parked_mails \
	tests/reliability/test_quorum_failover.py \
	tests/reliability/test_sentinel_failover.py \
	tests/workers/celery/test_newsletter.py tests/workers/celery/test_priority.py \
	tests/guard/test_timing.py \
	tests/workers/celery/test_order_worker.py \
	tests/workers/celery/test_readme_walk_worker.py \
	tests/workers/celery/test_outage_order_worker.py \
	tests/workers/celery/test_first_run_killed.py \
	tests/workers/celery/test_live_policy_workers.py \
	tests/workers/cli/test_demo.py \
	tests/relay/test_pace_relay.py
.PHONY: flake
flake: install
	@sh .ci/install-redis
	@sh .ci/flake $(FLAKE_RUNS) $(PYTEST_JOBS) $(FLAKE_TESTS)

## lint: ruff, ruff format, mypy strict, the structural measures (.ci/check_structure.py:
## module and function sizes, complexity waivers, import circles, no Celery in mailer/), then
## the manual's strict build.
lint: install
	$(BIN)/ruff check mailer workers devservers tests benchmarks examples docs/hooks.py
	$(BIN)/ruff format --check mailer workers devservers tests benchmarks examples docs/hooks.py
	$(BIN)/mypy
	$(BIN)/python .ci/check_structure.py
	$(MAKE) --no-print-directory docs

## docs: the manual (mkdocs.yml, docs/) built strictly into site/: a warning (a broken link, a
## page outside the nav) fails it. No network: the reference pages are generated from the code.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

## reference: the generated regions of the reference pages (settings, every command, the
## outcomes vocabulary) written again from the code into docs/; tests/docs fails until they are.
reference: install
	$(BIN)/python docs/hooks.py write

## bench: first the one table (benchmarks/table.py, about a minute and a half: each headline
## figure as a ratio to its floor measured in the same run), then each benchmark's own table.
bench: install
	@sh .ci/install-redis
	$(BIN)/python -m benchmarks.table
	$(BIN)/python -m benchmarks.limiter
	$(BIN)/python -m benchmarks.guard
	$(BIN)/python -m benchmarks.timing
	$(BIN)/python -m benchmarks.schedule
	$(BIN)/python -m benchmarks.schedule_scale
	$(BIN)/python -m benchmarks.newsletter
	$(BIN)/python -m benchmarks.drain
	$(BIN)/python -m benchmarks.enqueue
	$(BIN)/python -m benchmarks.smtp_reuse

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis site build dist

## demo: the main job on embedded defaults (in-process worker, memory limiter, local SMTP capture; no Redis)
demo: install-demo
	$(BIN)/mailguard demo
