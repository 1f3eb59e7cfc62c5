#!/usr/bin/env bash
# Run THERE (one H200), after sourcing setup_deps.sh: configure (Release, sm_90; the server
# only with SERVER=ON)
# and build quiver and the given targets in DIR/build-gpu. DIR is taken by its physical
# path, so a tree under build-trees/ linked to the checkout shares the checkout's build.
# Usage: build_tree.sh DIR LOG [TARGET...]; LOG (an absolute path) gets both steps' output.
set -uo pipefail
dir=$1 log=$2
shift 2
cd -P "$dir" || exit 1
# NCCL (tensor parallelism): the toolkit's, else the one PyTorch's wheels bring.
nccl=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])" 2>/dev/null || true)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DQUIVER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DQUIVER_SERVER=${SERVER:-OFF} ${nccl:+-DQUIVER_NCCL_ROOT=$nccl} >"$log" 2>&1 &&
  cmake --build build-gpu -j16 --target quiver "$@" >>"$log" 2>&1
