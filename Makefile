# The two commands of the README: `make up` runs the daemon on its embedded
# defaults, `make test` runs the tests. Both create the virtual environment
# when it is missing and reinstall when pyproject.toml changes.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: up test crash-matrix lint bench

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

# Without OPENAI_BASE_URL, `asyncai up` serves the bundled local model: install
# its runtime (llama-cpp-python builds from source, about 9 minutes on 2 cores
# the first time; pip caches the wheel) and fetch the model (1.1 GB, checked).
LOCAL_STAMP := $(VENV)/.installed-local
# Not -DGGML_NATIVE=ON: a native build emits AMX instructions that a VM's kernel may
# not allow, and the server dies of a general protection fault on its first request
# (seen 2026-11-30). The vector extensions are named instead, AMX off: AVX2 and the
# ones beside it. `make .venv/.installed-local LLAMA_CPU=detect` adds AVX-512 (with its
# VBMI, VNNI and BF16 instructions) or AVX-VNNI where the kernel reports this CPU has
# them (/proc/cpuinfo's flags): on two Zen 4 cores a question took 0.88x the time, but
# the answers moved with the arithmetic (21 of 50 held-out against 25, 2026-12-04,
# docs/benchmarks), so it is not the default. The wheel fits the machine it was built on.
LLAMA_CPU ?= avx2
ifneq ($(filter-out avx2 detect,$(LLAMA_CPU)),)
$(error LLAMA_CPU is avx2 (the default) or detect, not '$(LLAMA_CPU)')
endif
CPU_FLAGS := $(if $(filter detect,$(LLAMA_CPU)),$(shell grep -m1 '^flags' /proc/cpuinfo 2>/dev/null))
cpu_has = $(if $(filter-out $(CPU_FLAGS),$(1)),OFF,ON)
AVX512 := $(call cpu_has,avx512f avx512cd avx512vl avx512dq avx512bw)
avx512_has = $(if $(filter ON,$(AVX512)),$(call cpu_has,$(1)),OFF)
LLAMA_CPU_ARGS := -DGGML_AVX512=$(AVX512) -DGGML_AVX512_VBMI=$(call avx512_has,avx512vbmi) \
	-DGGML_AVX512_VNNI=$(call avx512_has,avx512_vnni) \
	-DGGML_AVX512_BF16=$(call avx512_has,avx512_bf16) -DGGML_AVX_VNNI=$(call cpu_has,avx_vnni)
LLAMA_CMAKE_ARGS := -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
	-DLLAMA_CURL=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
	-DGGML_F16C=ON -DGGML_BMI2=ON $(LLAMA_CPU_ARGS) \
	-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
# pip keeps the wheel it built under the source's name, whatever CMAKE_ARGS were: a
# build with more extensions gets a pip cache of its own for each set of them, so it
# never takes the AVX2 wheel of pip's own cache, nor that one its wheel.
LLAMA_PIP_CACHE := $(if $(findstring =ON,$(LLAMA_CPU_ARGS)),$(HOME)/.cache/asyncai/pip-llama/$(shell echo '$(LLAMA_CPU_ARGS)' | cksum | cut -d' ' -f1))

$(LOCAL_STAMP): $(STAMP)
	@echo "make: installing asyncai[local]: llama-cpp-python builds from source, about 9 minutes on 2 cores the first time"
	@echo "make: llama.cpp's CPU extensions beyond AVX2 (LLAMA_CPU=$(LLAMA_CPU)): $(LLAMA_CPU_ARGS)"
	CMAKE_BUILD_PARALLEL_LEVEL=2 CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" \
		$(PY) -m pip install $(if $(LLAMA_PIP_CACHE),--cache-dir "$(LLAMA_PIP_CACHE)") -e '.[dev,local]'
	touch $(LOCAL_STAMP)

up: $(STAMP)
ifeq ($(strip $(OPENAI_BASE_URL)),)
	$(MAKE) $(LOCAL_STAMP)
	$(VENV)/bin/asyncai model fetch
endif
	$(VENV)/bin/asyncai up

# The documentation (docs/, mkdocs.yml) is built strictly, so a broken link or
# anchor fails the tests; into a temporary directory, since only the check matters
# here (`$(VENV)/bin/mkdocs serve` to read it). Not --quiet: it hides the warnings
# from --strict too, and the build passes with a broken link. NO_MKDOCS_2_WARNING
# quiets the theme's banner about its end of life.
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	site=$$(mktemp -d) && NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir "$$site"; \
		status=$$?; rm -rf "$$site"; exit $$status
	# the question set's third-party MCP servers, pinned, each in a venv of its own
	# (uv, once; tests/test_bench_questions.py starts them)
	$(PY) -m bench.questions --install-servers
	$(PY) -m pytest

# The rest of the crash-point matrix (direct mode, the approval steps): CI runs it
# after `make test`; the one-daemon code-mode part is in `make test` itself.
crash-matrix: $(STAMP)
	$(PY) -m pytest -m crash_matrix

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The fast benchmarks; `python -m bench.questions` needs a model (docs/benchmarks/index.md).
bench: $(STAMP)
	for b in bench/code_mode.py bench/channels.py bench/sessions.py bench/approvals.py bench/scopes.py bench/daemon.py bench/catalog.py bench/web.py; do $(PY) $$b || exit 1; done
