#include "engine/model_runner.h"

#include <algorithm>
#include <chrono>

namespace quiver {

namespace {

// Offsets, in int32 elements, of one step's inputs inside the packed input buffer. Each
// region starts 64-byte aligned. The layout depends only on the counts, so every replay
// of a bucket's graph finds its inputs where the capture saw them.
struct InputLayout {
  int64_t token_ids, lora_ids, positions, slot_mapping, token_slot, sorted_tokens;  // [tokens]
  int64_t seg_start, seg_slot;                              // [segments + 1], [segments]
  int64_t query_start, seq_lens;                            // [seqs + 1], [seqs]
  int64_t logit_rows, logit_slot;                           // [logit rows]
  int64_t sampling;                                         // [kSampleInputWords * logit rows]
  int64_t block_tables;                                     // [seqs, width]
  int64_t end;
};

InputLayout input_layout(int64_t tokens, int64_t seqs, int64_t segments, int64_t logit_rows, int64_t width) {
  int64_t at = 0;
  auto take = [&at](int64_t count) {
    const int64_t off = at;
    at += (std::max<int64_t>(count, 1) + 15) / 16 * 16;
    return off;
  };
  InputLayout l;
  l.token_ids = take(tokens);
  l.lora_ids = take(tokens);
  l.positions = take(tokens);
  l.slot_mapping = take(tokens);
  l.token_slot = take(tokens);
  l.sorted_tokens = take(tokens);
  l.seg_start = take(segments + 1);
  l.seg_slot = take(segments);
  l.query_start = take(seqs + 1);
  l.seq_lens = take(seqs);
  l.logit_rows = take(logit_rows);
  l.logit_slot = take(logit_rows);
  l.sampling = take(kSampleInputWords * logit_rows);
  l.block_tables = take(seqs * width);
  l.end = at;
  return l;
}

// A type other than f32 that the plans of steps up to max_tokens tokens multiply x in, or
// kF32 when none does (the Workspace then holds no copies; its copies fit a 16-bit or an
// fp8 one). A plan rounds x from some token count up (DispatchTable::gemv_max_n), so the
// largest step and the skinny kernel's 16 decide, with or without LoRA.
DType gemm_copy_type(const LlamaModel& model, int max_tokens, const LoraSlotPool* lora) {
  for (const int n : {max_tokens, std::min(max_tokens, 16)})
    for (bool on : {false, true}) {
      const StepPlan p = model.backend()->plan(model.step_shape(n, on, lora));
      for (const GroupPlan& g : p.group)
        if (g.x_type != DType::kF32) return g.x_type;
    }
  return DType::kF32;
}

}  // namespace

ModelRunner::ModelRunner(const LlamaModel* model, const LoraSlotPool* lora, RunnerLimits limits)
    : model_(model),
      lora_(lora),
      limits_(limits),
      backend_(model->backend()),
      ws_(model->backend(), model->config(), gemm_copy_type(*model, limits.max_num_batched_tokens, lora),
          limits.max_num_batched_tokens, lora ? lora->max_rank() : 1),
      buckets_(decode_buckets(std::min(limits.max_num_seqs, limits.max_num_batched_tokens))) {
  const int64_t t = limits_.max_num_batched_tokens, s = limits_.max_num_seqs;
  const int64_t max_bucket = buckets_.empty() ? 0 : buckets_.back();
  const InputLayout cap = input_layout(t, s, t, t, limits_.max_blocks_per_seq);
  inputs_ = Buffer(backend_, sizeof(int32_t) * static_cast<size_t>(cap.end));
  const int64_t logit_rows = std::max<int64_t>(limits_.max_logit_chunk, max_bucket);
  const int64_t vocab = model->config().vocab_size;
  // Any slot may hold vocabulary rows or an lm_head LoRA: with a pool every logits row goes
  // through vocab_logits.
  vocab_ = lora_ != nullptr;
  width_ = vocab_ ? lora_->vocab_width() : vocab;
  logits_ = Buffer(backend_, sizeof(float) * logit_rows * width_);
  model->size_head_buffers(ws_, logit_rows);
  if (vocab_) {
    vocab_tables_ = lora_->vocab_tables();
    base_logits_ = Buffer(backend_, sizeof(float) * logit_rows * vocab);
  }
  if (limits_.sample_on_device) {
    sample_out_ = Buffer(backend_, sizeof(int32_t) * kSampleOutputWords * static_cast<size_t>(std::max(t, max_bucket)));
    // One mask row per sequence at most: only a sequence's last logits row samples.
    mask_words_ = (width_ + 31) / 32;
    masks_ = Buffer(backend_, sizeof(int32_t) * static_cast<size_t>(s * mask_words_));
  }
}

ModelRunner::~ModelRunner() = default;

void ModelRunner::set_kv_cache(KvCache* kv) {
  check(!graphs_, "set_kv_cache: the captured graphs point at the cache they were captured with");
  kv_ = kv;
  kv_view_.layers = kv->layers();
}

int64_t ModelRunner::graph_memory_estimate() const {
  // The 7B shape's 46 decode graphs (32 layers) took 0.31 GiB of the H200, 6.9 MiB each;
  // 8 MiB keeps a margin.
  constexpr int64_t kGraphBytes = int64_t{8} << 20;
  return static_cast<int64_t>(buckets_.size()) * (lora_ != nullptr ? 2 : 1) * kGraphBytes;
}

size_t ModelRunner::buffer_bytes() const {
  return ws_.bytes() + inputs_.bytes() + logits_.bytes() + base_logits_.bytes() + sample_out_.bytes() + masks_.bytes();
}

void ModelRunner::profile_largest_steps() {
  check(kv_ != nullptr, "profile_largest_steps: no KV cache");
  // Prefill: max_num_batched_tokens tokens in sequences of at most max_model_len, every
  // block-table entry block 0, no KV slot written, one logits row a sequence.
  const int len = std::max(1, std::min(limits_.max_num_batched_tokens, limits_.max_model_len));
  const int total = static_cast<int>(std::min<int64_t>(limits_.max_num_batched_tokens, int64_t{len} * limits_.max_num_seqs));
  const int block_size = kv_->shape().block_size;
  ForwardBatch b;
  b.query_start.push_back(0);
  for (int start = 0; start < total; start += len) {
    const int n = std::min(len, total - start);
    for (int i = 0; i < n; ++i) {
      b.token_ids.push_back(0);
      b.positions.push_back(i);
      b.slot_mapping.push_back(-1);
      b.token_lora_slot.push_back(lora_ != nullptr ? 0 : -1);
    }
    b.query_start.push_back(start + n);
    b.seq_lens.push_back(n);
    b.logit_rows.push_back(start + n - 1);
    b.max_blocks_per_seq = std::max(b.max_blocks_per_seq, (n + block_size - 1) / block_size);
  }
  b.block_tables.assign(static_cast<size_t>(b.num_seqs()) * b.max_blocks_per_seq, 0);
  std::vector<float> logits;
  execute(b, &logits);
  // Decode: the largest bucket, as capture_graphs' first warm-up.
  if (!buckets_.empty()) {
    const int bucket = buckets_.back();
    for (bool lora : {false, true})
      if (!lora || lora_ != nullptr) run_padded(padding_step(bucket, lora), bucket);
  }
  backend_->synchronize();
}

StepTensors ModelRunner::padding_step(int bucket, bool lora) {
  ForwardBatch none;
  none.decode_only = true;
  StepTensors st = prepare(pad_decode_batch(none, bucket, limits_.max_blocks_per_seq), true);
  st.lora_active = lora;
  st.plan = plan(bucket, lora);
  return st;
}

StepTensors ModelRunner::prepare(const ForwardBatch& b, bool padded, const DeviceSampling* ds) {
  const int n = b.num_tokens(), num_seqs = b.num_seqs();
  // LoRA segments. Graph-capable backends get one per token in padded steps (a fixed
  // count, rule 4; their kernels read token_slot anyway); otherwise maximal runs of equal
  // slots, which the CPU backend turns into one GEMM per run.
  seg_start_.assign(1, 0);
  seg_slot_.clear();
  bool any_lora = false;
  const bool per_token = padded && backend_->supports_graphs();
  for (int i = 0; i < n; ++i) {
    any_lora |= b.token_lora_slot[i] >= 0;
    if (i > 0 && (per_token || b.token_lora_slot[i] != b.token_lora_slot[i - 1])) seg_start_.push_back(i);
    if (seg_slot_.size() < seg_start_.size()) seg_slot_.push_back(b.token_lora_slot[i]);
  }
  seg_start_.push_back(n);
  const int segments = static_cast<int>(seg_slot_.size());
  lora_sorted_tokens(b.token_lora_slot, &sorted_tokens_);
  const int rows = static_cast<int>(b.logit_rows.size());
  const int width = padded ? limits_.max_blocks_per_seq : std::max(1, b.max_blocks_per_seq);
  check(b.max_blocks_per_seq <= width, "block table wider than the runner's limit");

  const InputLayout l = input_layout(n, num_seqs, segments, rows, width);
  check(static_cast<size_t>(l.end) * sizeof(int32_t) <= inputs_.bytes(), "step inputs larger than their buffer");
  staging_.assign(static_cast<size_t>(l.end), 0);
  auto put = [this](int64_t at, const std::vector<int32_t>& v) { std::copy(v.begin(), v.end(), staging_.begin() + at); };
  put(l.token_ids, b.token_ids);
  put(l.lora_ids, b.token_ids);
  if (vocab_) {
    // A token whose embed_tokens row the request's adapter replaces (or adds) reads the
    // slot's row: embedding finds it past the base vocabulary (LoraSlotPool::embed_row).
    for (int i = 0; i < n; ++i)
      staging_[static_cast<size_t>(l.token_ids + i)] = lora_->embed_row(b.token_lora_slot[i], b.token_ids[i]);
    for (int r = 0; r < rows; ++r)
      staging_[static_cast<size_t>(l.logit_slot + r)] = b.token_lora_slot[static_cast<size_t>(b.logit_rows[r])];
  }
  put(l.positions, b.positions);
  put(l.slot_mapping, b.slot_mapping);
  put(l.token_slot, b.token_lora_slot);
  put(l.sorted_tokens, sorted_tokens_);
  put(l.seg_start, seg_start_);
  put(l.seg_slot, seg_slot_);
  put(l.query_start, b.query_start);
  put(l.seq_lens, b.seq_lens);
  put(l.logit_rows, b.logit_rows);
  if (limits_.sample_on_device) pack_sample_inputs(ds, rows, staging_.data() + l.sampling);
  if (b.max_blocks_per_seq == width) {
    put(l.block_tables, b.block_tables);
  } else {
    for (int s = 0; s < num_seqs; ++s)
      std::copy_n(b.block_tables.begin() + static_cast<ptrdiff_t>(s) * b.max_blocks_per_seq, b.max_blocks_per_seq,
                  staging_.begin() + l.block_tables + static_cast<ptrdiff_t>(s) * width);
  }
  backend_->copy_from_host(inputs_.data(), staging_.data(), staging_.size() * sizeof(int32_t));

  int32_t* base = static_cast<int32_t*>(inputs_.data());
  const Device dev = backend_->device();
  auto i32 = [&](int64_t at, int64_t count) { return Tensor(base + at, DType::kI32, {count}, dev); };
  sample_inputs_ = base + l.sampling;
  sample_rows_ = rows;
  StepTensors st;
  st.num_tokens = n;
  st.token_ids = i32(l.token_ids, n);
  st.lora_ids = i32(l.lora_ids, n);
  st.positions = i32(l.positions, n);
  st.slot_mapping = i32(l.slot_mapping, n);
  st.attn.query_start = i32(l.query_start, num_seqs + 1);
  st.attn.seq_lens = i32(l.seq_lens, num_seqs);
  st.attn.block_tables = Tensor(base + l.block_tables, DType::kI32, {num_seqs, width}, dev);
  st.attn.num_seqs = num_seqs;
  if (padded) {
    // Upper bounds, identical at capture and at every replay (rule 4).
    st.attn.max_query_len = 1;
    st.attn.max_seq_len = limits_.max_model_len;
  } else {
    for (int s = 0; s < num_seqs; ++s) {
      st.attn.max_query_len = std::max(st.attn.max_query_len, b.query_start[s + 1] - b.query_start[s]);
      st.attn.max_seq_len = std::max(st.attn.max_seq_len, b.seq_lens[s]);
    }
  }
  st.lora.token_slot = i32(l.token_slot, n);
  st.lora.sorted_tokens = i32(l.sorted_tokens, n);
  st.lora.num_segments = segments;
  st.lora.seg_start = i32(l.seg_start, segments + 1);
  st.lora.seg_slot = i32(l.seg_slot, segments);
  st.lora_active = any_lora && lora_ != nullptr;
  // Padded steps take their bucket's plan, the one captured (decode tokens, no runs).
  const bool runs = st.lora_active && !padded;
  st.lora.run_tokens = runs ? lora_run_tokens(b.token_lora_slot, sorted_tokens_) : -1;
  st.plan = plan(n, st.lora_active, runs ? st.lora.run_tokens : 0);
  st.num_logit_rows = rows;
  st.logit_rows = i32(l.logit_rows, std::max(rows, 1));
  st.logit_slot = i32(l.logit_slot, std::max(rows, 1));
  if (vocab_ && vocab_tables_.rows_per_slot > 0) st.embed_extra = vocab_tables_.embed_rows;
  return st;
}

StepPlan ModelRunner::plan(int tokens, bool lora, int64_t run_tokens) const {
  StepShape shape = model_->step_shape(tokens, lora, lora_);
  shape.lora_run_tokens = shape.lora ? run_tokens : 0;
  return backend_->plan(shape);
}

void ModelRunner::run_padded(const StepTensors& st, int bucket) {
  model_->forward(st, ws_, kv_view_, lora_);
  logits_of(logits_.tensor(DType::kF32, {bucket, width_}), st, 0, bucket);
}

void ModelRunner::logits_of(Tensor out, const StepTensors& st, int first, int rows) {
  if (!vocab_) {
    model_->lm_head(out, ws_, first, rows);
    return;
  }
  Tensor base = base_logits_.tensor(DType::kF32, {rows, model_->config().vocab_size});
  model_->lm_head(base, ws_, first, rows);
  const Tensor slots = st.logit_slot.rows(first, rows);
  backend_->vocab_logits(out, base, model_->selected(ws_, first, rows), slots, vocab_tables_);
}

void ModelRunner::upload_masks(DeviceSampling* ds) {
  const int m = ds->num_masked();
  if (m == 0) return;
  check(m <= limits_.max_num_seqs && ds->write_mask, "structured-output masks without a writer or past the table");
  mask_host_.assign(static_cast<size_t>(m) * mask_words_, 0);
  int t = 0;
  for (int r = 0; r < ds->rows(); ++r) {
    if (!ds->masked[static_cast<size_t>(r)]) continue;
    if (!ds->write_mask(r, mask_host_.data() + static_cast<size_t>(t) * mask_words_)) ds->dropped[static_cast<size_t>(r)] = 1;
    ++t;
  }
  backend_->copy_from_host(masks_.data(), mask_host_.data(), mask_host_.size() * sizeof(uint32_t));
}

void ModelRunner::sample_rows(Tensor logits, int first, int count) {
  const Device dev = backend_->device();
  auto* out = static_cast<int32_t*>(sample_out_.data());
  SampleInputs in = sample_input_views(sample_inputs_, sample_rows_, first, count, dev);
  in.masks = masks_.tensor(DType::kI32, {limits_.max_num_seqs, mask_words_});
  backend_->sample(sample_output_views(out, sample_rows_, first, count, dev), logits, in);
}

void ModelRunner::download_samples(int rows, DeviceSampling* ds) {
  check(ds->rows() <= rows, "more sampling rows than logits rows");
  sample_host_.resize(static_cast<size_t>(rows) * kSampleOutputWords);
  backend_->copy_to_host(sample_host_.data(), sample_out_.data(), sample_host_.size() * sizeof(int32_t));
  unpack_sample_outputs(sample_host_.data(), rows, ds);
}

GraphCaptureInfo ModelRunner::capture_graphs() {
  GraphCaptureInfo info;
  check(kv_ != nullptr, "capture_graphs: no KV cache");
  if (!backend_->supports_graphs() || buckets_.empty() || graphs_) return info;
  const auto t0 = std::chrono::steady_clock::now();
  graphs_ = std::make_unique<GraphRunner>(backend_);
  // Largest first: its warm-up grows the scratch buffers once to their decode maximum,
  // so every graph records the same scratch addresses.
  for (auto it = buckets_.rbegin(); it != buckets_.rend(); ++it) {
    const int bucket = *it;
    for (bool lora : {false, true}) {
      if (lora && lora_ == nullptr) continue;
      const StepTensors st = padding_step(bucket, lora);
      if (graphs_->has(bucket, st.plan)) continue;  // a plan without LoRA kernels (rank 0)
      run_padded(st, bucket);
      backend_->synchronize();
      graphs_->capture(bucket, st.plan, [&] { run_padded(st, bucket); });
    }
  }
  backend_->synchronize();
  info.num_graphs = graphs_->num_graphs();
  info.num_buckets = static_cast<int>(buckets_.size());
  info.max_bucket = buckets_.back();
  info.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return info;
}

StepPath ModelRunner::execute_padded(const ForwardBatch& b, int bucket, std::vector<float>* logits,
                                     DeviceSampling* ds) {
  const StepTensors st = prepare(pad_decode_batch(b, bucket, limits_.max_blocks_per_seq), true, ds);
  StepPath path;
  path.lora_active = st.lora_active;
  path.bucket = bucket;
  path.plan = st.plan;
  if (graphs_ && graphs_->has(bucket, st.plan)) {
    graphs_->replay(bucket, st.plan);
    path.graph = true;
    path.path = "graph bs=" + std::to_string(bucket);
  } else {
    run_padded(st, bucket);
    path.path = "eager bs=" + std::to_string(bucket) + " (padded)";
  }
  // Sampling follows the graph rather than being part of it: the masks of structured
  // outputs are written while the graph runs (upload_masks), and a sample kernel launched
  // right behind the replay costs no gap on the device.
  if (logits == nullptr) return path;  // a tensor-parallel rank past the first
  const bool device = limits_.sample_on_device && ds != nullptr;
  if (device) {
    upload_masks(ds);
    sample_rows(logits_.tensor(DType::kF32, {bucket, width_}), 0, bucket);
    download_samples(bucket, ds);
  }
  if (device && !ds->needs_host_logits()) {
    logits->clear();
    return path;
  }
  // Only the real rows come back; padding rows' logits stay on the device.
  const size_t count = static_cast<size_t>(b.num_seqs()) * width_;
  logits->resize(count);
  backend_->copy_to_host(logits->data(), logits_.data(), count * sizeof(float));
  return path;
}

StepPath ModelRunner::execute(const ForwardBatch& b, std::vector<float>* logits, DeviceSampling* ds) {
  const int n = b.num_tokens(), num_seqs = b.num_seqs();
  check(n > 0 && n <= limits_.max_num_batched_tokens, "batch has more tokens than max_num_batched_tokens");
  check(num_seqs <= limits_.max_num_seqs, "batch has more sequences than max_num_seqs");
  check(b.max_blocks_per_seq <= limits_.max_blocks_per_seq, "block table wider than the runner's limit");
  if (is_paddable_decode(b)) {
    const int bucket = pick_bucket(buckets_, num_seqs);
    if (bucket > 0) return execute_padded(b, bucket, logits, ds);
  }
  check(ds == nullptr || ds->rows() == static_cast<int>(b.logit_rows.size()), "one DeviceSampling row per logits row");

  const StepTensors st = prepare(b, false, ds);
  model_->forward(st, ws_, kv_view_, lora_);
  const int64_t vocab = width_;
  const int rows = st.num_logit_rows;
  // Eager steps (prefill, mixed batches) sample on the device too, chunk by chunk, so a
  // request's tokens come from the same sampler whichever kind of step produced them.
  const bool device = limits_.sample_on_device && ds != nullptr && rows > 0;
  const bool host_logits = logits != nullptr && (!device || ds->needs_host_logits());
  if (host_logits) logits->resize(static_cast<size_t>(rows) * vocab);
  else if (logits != nullptr) logits->clear();
  if (device) upload_masks(ds);  // while the forward pass runs
  for (int r = 0; r < rows; r += limits_.max_logit_chunk) {
    const int count = std::min(limits_.max_logit_chunk, rows - r);
    Tensor out = logits_.tensor(DType::kF32, {count, vocab});
    logits_of(out, st, r, count);
    if (device) sample_rows(out, r, count);
    if (host_logits) backend_->copy_to_host(logits->data() + static_cast<size_t>(r) * vocab, out.data, out.bytes());
  }
  if (device) download_samples(rows, ds);
  StepPath path;
  path.lora_active = st.lora_active;
  path.plan = st.plan;
  path.path = "eager";
  return path;
}

}  // namespace quiver
