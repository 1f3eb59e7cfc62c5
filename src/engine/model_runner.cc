#include "engine/model_runner.h"

#include <algorithm>

namespace quiver {

namespace {
size_t i32_bytes(int64_t n) { return sizeof(int32_t) * static_cast<size_t>(std::max<int64_t>(n, 1)); }
}  // namespace

ModelRunner::ModelRunner(const LlamaModel* model, KvCache* kv, const LoraSlotPool* lora, RunnerLimits limits)
    : model_(model),
      kv_(kv),
      lora_(lora),
      limits_(limits),
      backend_(model->backend()),
      ws_(model->backend(), model->config(), limits.max_num_batched_tokens, lora ? lora->max_rank() : 1) {
  const int64_t t = limits_.max_num_batched_tokens, s = limits_.max_num_seqs;
  token_ids_ = Buffer(backend_, i32_bytes(t));
  positions_ = Buffer(backend_, i32_bytes(t));
  slot_mapping_ = Buffer(backend_, i32_bytes(t));
  token_slot_ = Buffer(backend_, i32_bytes(t));
  seg_start_ = Buffer(backend_, i32_bytes(t + 1));
  seg_slot_ = Buffer(backend_, i32_bytes(t));
  query_start_ = Buffer(backend_, i32_bytes(s + 1));
  seq_lens_ = Buffer(backend_, i32_bytes(s));
  block_tables_ = Buffer(backend_, i32_bytes(s * limits_.max_blocks_per_seq));
  logit_rows_ = Buffer(backend_, i32_bytes(t));
  logits_ = Buffer(backend_, sizeof(float) * limits_.max_logit_chunk * model->config().vocab_size);
  kv_view_.k = kv_->k_all();
  kv_view_.v = kv_->v_all();
}

void ModelRunner::upload(const Buffer& dst, const std::vector<int32_t>& src) {
  check(src.size() * sizeof(int32_t) <= dst.bytes(), "step input larger than its buffer");
  if (!src.empty()) backend_->copy_from_host(dst.data(), src.data(), src.size() * sizeof(int32_t));
}

StepPath ModelRunner::execute(const ForwardBatch& b, std::vector<float>* logits) {
  const int n = b.num_tokens(), num_seqs = b.num_seqs();
  check(n > 0 && n <= limits_.max_num_batched_tokens, "batch has more tokens than max_num_batched_tokens");
  check(num_seqs <= limits_.max_num_seqs, "batch has more sequences than max_num_seqs");
  check(b.max_blocks_per_seq <= limits_.max_blocks_per_seq, "block table wider than the runner's limit");

  // LoRA segments: maximal runs of equal slots (the prefill kernels' view of token_slot).
  std::vector<int32_t> seg_start{0}, seg_slot;
  bool any_lora = false;
  for (int i = 0; i < n; ++i) {
    any_lora |= b.token_lora_slot[i] >= 0;
    if (i > 0 && b.token_lora_slot[i] != b.token_lora_slot[i - 1]) seg_start.push_back(i);
    if (seg_slot.size() < seg_start.size()) seg_slot.push_back(b.token_lora_slot[i]);
  }
  seg_start.push_back(n);

  upload(token_ids_, b.token_ids);
  upload(positions_, b.positions);
  upload(slot_mapping_, b.slot_mapping);
  upload(token_slot_, b.token_lora_slot);
  upload(seg_start_, seg_start);
  upload(seg_slot_, seg_slot);
  upload(query_start_, b.query_start);
  upload(seq_lens_, b.seq_lens);
  upload(block_tables_, b.block_tables);
  upload(logit_rows_, b.logit_rows);

  StepTensors st;
  st.num_tokens = n;
  st.token_ids = token_ids_.tensor(DType::kI32, {n});
  st.positions = positions_.tensor(DType::kI32, {n});
  st.slot_mapping = slot_mapping_.tensor(DType::kI32, {n});
  st.attn.query_start = query_start_.tensor(DType::kI32, {num_seqs + 1});
  st.attn.seq_lens = seq_lens_.tensor(DType::kI32, {num_seqs});
  st.attn.block_tables = block_tables_.tensor(DType::kI32, {num_seqs, std::max(1, b.max_blocks_per_seq)});
  st.attn.num_seqs = num_seqs;
  for (int s = 0; s < num_seqs; ++s) {
    st.attn.max_query_len = std::max(st.attn.max_query_len, b.query_start[s + 1] - b.query_start[s]);
    st.attn.max_seq_len = std::max(st.attn.max_seq_len, b.seq_lens[s]);
  }
  st.lora.token_slot = token_slot_.tensor(DType::kI32, {n});
  st.lora.num_segments = static_cast<int>(seg_slot.size());
  st.lora.seg_start = seg_start_.tensor(DType::kI32, {st.lora.num_segments + 1});
  st.lora.seg_slot = seg_slot_.tensor(DType::kI32, {st.lora.num_segments});
  st.lora_active = any_lora && lora_ != nullptr;
  const int rows = static_cast<int>(b.logit_rows.size());
  st.num_logit_rows = rows;
  st.logit_rows = logit_rows_.tensor(DType::kI32, {std::max(rows, 1)});

  model_->forward(st, ws_, kv_view_, lora_);

  const int64_t vocab = model_->config().vocab_size;
  logits->resize(static_cast<size_t>(rows) * vocab);
  for (int r = 0; r < rows; r += limits_.max_logit_chunk) {
    const int count = std::min(limits_.max_logit_chunk, rows - r);
    Tensor out = logits_.tensor(DType::kF32, {count, vocab});
    model_->lm_head(out, ws_, r, count);
    backend_->copy_to_host(logits->data() + static_cast<size_t>(r) * vocab, out.data, out.bytes());
  }
  StepPath path;
  path.lora_active = st.lora_active;
  return path;
}

}  // namespace quiver
