# Two commands for a fresh machine: `make demo` (the main job on the embedded
# default model) and `make test` (the suite). Both create .venv when missing and
# install everything from this project's own files.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO_DIR ?= demo-out

.PHONY: install test test-slow demo bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned torch downloads gigabytes.
	$(BIN)/python -m pip install --quiet torch==2.14.1 torchvision==0.29.1
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

# The main job on the embedded default model: sample suite -> ingest -> index -> retrieval table -> the BM25
# agent on every question (SmolLM2-135M, all episodes batched) -> evaluation. Re-running
# resumes: finished episodes are kept.
demo: $(STAMP)
	$(BIN)/dossier sample --out $(DEMO_DIR)/sample
	$(BIN)/dossier ingest $(DEMO_DIR)/sample/pdfs --corpus $(DEMO_DIR)/corpus
	$(BIN)/dossier index --corpus $(DEMO_DIR)/corpus
	$(BIN)/dossier retrieval-eval --corpus $(DEMO_DIR)/corpus --questions $(DEMO_DIR)/sample/questions.jsonl
	$(BIN)/dossier run --agent bm25 --model default --questions $(DEMO_DIR)/sample/questions.jsonl \
		--corpus $(DEMO_DIR)/corpus --out $(DEMO_DIR)/run-bm25
	$(BIN)/dossier eval $(DEMO_DIR)/run-bm25

clean:
	rm -rf $(DEMO_DIR) .pytest_cache
