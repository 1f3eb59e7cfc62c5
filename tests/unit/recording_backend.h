// RecordingBackend: the ref backend with graphs that behave like CUDA graphs, for tests of
// graph capture and replay on the CPU (test_graph_padding.cc, test_tensor_parallel.cc).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "backend/ref/ref_backend.h"

namespace quiver {

// RefBackend whose graphs behave like CUDA graphs: captured ops keep their arguments
// (device addresses and host integers) and replay re-runs exactly those. With `defer` its
// plan leaves every LoRA expand to the op after the projection (ExpandKernel::kNextOp), as
// the CUDA backend's does for decode batches: the model must hand each group's plan and
// LoRA to the right op.
class RecordingBackend : public RefBackend {
 public:
  explicit RecordingBackend(bool defer = false) : defer_(defer) {}
  bool supports_graphs() const override { return true; }
  StepPlan plan(const StepShape& shape) const override {
    StepPlan p = RefBackend::plan(shape);
    if (defer_)
      for (GroupPlan& g : p.group)
        if (g.lora()) g.expand = ExpandKernel::kNextOp;
    return p;
  }
  void begin_capture() override {
    check(!capturing_, "nested capture");
    capturing_ = true;
    recording_.clear();
  }
  int end_capture() override {
    check(capturing_, "no capture");
    capturing_ = false;
    graphs_.push_back(std::move(recording_));
    return static_cast<int>(graphs_.size()) - 1;
  }
  void replay(int id) override {
    ++replays_;
    for (auto& op : graphs_.at(static_cast<size_t>(id))) op();
  }
  int replays() const { return replays_; }
  // Runs op now, or records it into the graph being captured: what a device stream does
  // with work queued on it by others (collectives, parallel/communicator.h).
  void run_or_record(std::function<void()> op) {
    if (capturing_) recording_.push_back(std::move(op));
    else op();
  }

  void* alloc(size_t bytes) override { return refuse("alloc"), RefBackend::alloc(bytes); }
  void copy_from_host(void* d, const void* s, size_t n) override { refuse("copy_from_host"), RefBackend::copy_from_host(d, s, n); }
  void copy_to_host(void* d, const void* s, size_t n) override { refuse("copy_to_host"), RefBackend::copy_to_host(d, s, n); }

#define QV_RECORD(call) \
  if (capturing_) recording_.push_back([=, this] { RefBackend::call; }); else RefBackend::call
  void copy(void* d, const void* s, size_t n) override { QV_RECORD(copy(d, s, n)); }
  void embedding(Tensor o, Tensor t, Tensor x, Tensor i) override { QV_RECORD(embedding(o, t, x, i)); }
  void rms_norm_f32(Tensor o, Tensor x, Tensor w, float e) override { QV_RECORD(rms_norm_f32(o, x, w, e)); }
  void add_rms_norm_f32(Tensor o, Tensor r, Tensor x, Tensor w, float e) override {
    QV_RECORD(add_rms_norm_f32(o, r, x, w, e));
  }
  void matmul(Tensor y, Tensor x, Tensor w, Tensor b) override { QV_RECORD(matmul(y, x, w, b)); }
  void rope(Tensor q, Tensor k, Tensor p, Tensor cs) override { QV_RECORD(rope(q, k, p, cs)); }
  void kv_write(const KvLayer& c, Tensor k, Tensor v, Tensor s) override { QV_RECORD(kv_write(c, k, v, s)); }
  void attention(Tensor o, Tensor q, const KvLayer& c, const AttentionMeta& m, float s) override {
    QV_RECORD(attention(o, q, c, m, s));
  }
  void silu_mul_f32(Tensor o, Tensor g, Tensor u) override { QV_RECORD(silu_mul_f32(o, g, u)); }
  void gather_rows(Tensor o, Tensor x, Tensor r) override { QV_RECORD(gather_rows(o, x, r)); }
  void vocab_logits(Tensor o, Tensor b, Tensor x, Tensor s, const VocabTables& t) override {
    QV_RECORD(vocab_logits(o, b, x, s, t));
  }
  void lora_shrink(Tensor t, Tensor x, Tensor a, const LoraMeta& m) override { QV_RECORD(lora_shrink(t, x, a, m)); }
  void lora_expand(Tensor y, Tensor t, Tensor b, const LoraMeta& m) override { QV_RECORD(lora_expand(y, t, b, m)); }
#undef QV_RECORD

 private:
  void refuse(const char* what) const { check(!capturing_, std::string(what) + " during graph capture"); }
  bool defer_;
  bool capturing_ = false;
  std::vector<std::function<void()>> recording_;
  std::vector<std::vector<std::function<void()>>> graphs_;
  int replays_ = 0;
};

}  // namespace quiver
