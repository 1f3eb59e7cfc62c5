// CUDA graphs for the backend: stream capture of the ops enqueued on the backend's one
// stream, instantiation, and replay on the same stream (so a replay is ordered after the
// input uploads that precede it and before the logits download that follows).
//
// Capture mode is thread-local: a CUDA call on this thread that cannot be captured
// (cudaMalloc, a synchronizing copy) fails the capture loudly instead of being silently
// left out of the graph, while other threads (tokenizer, server) are unaffected.
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.h"

namespace quiver {

using cuda::cuda_check;

void CudaBackend::begin_capture() {
  check(!capturing(), "begin_capture: a capture is already in progress");
  // Errors left over from earlier eager work would be blamed on the capture.
  cuda_check(cudaGetLastError());
  cuda_check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
}

int CudaBackend::end_capture() {
  check(capturing(), "end_capture: no capture in progress");
  cudaGraph_t graph = nullptr;
  cuda_check(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);  // the executable graph keeps its own copy
  cuda_check(e);
  // Upload now, so the first replay does not pay for it inside a timed step.
  cuda_check(cudaGraphUpload(exec, stream_));
  graphs_.push_back(exec);
  return static_cast<int>(graphs_.size()) - 1;
}

void CudaBackend::replay(int graph_id) {
  check(graph_id >= 0 && graph_id < static_cast<int>(graphs_.size()), "replay: unknown graph id");
  cuda_check(cudaGraphLaunch(graphs_[static_cast<size_t>(graph_id)], stream_));
}

}  // namespace quiver
