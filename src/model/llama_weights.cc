#include "model/llama_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/splitmix.h"
#include "model/fp8_weights.h"
#include "model/int8_weights.h"

namespace quiver {

namespace {

std::string layer_prefix(int64_t l) { return "model.layers." + std::to_string(l) + "."; }

size_t padded(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Frees the owned buffer that starts at data, if there is one.
bool erase_owned(std::vector<Buffer>& owned, const void* data) {
  const auto it = std::find_if(owned.begin(), owned.end(), [&](const Buffer& b) { return b.data() == data; });
  if (it == owned.end()) return false;
  owned.erase(it);
  return true;
}

class Loader {
 public:
  Loader(const Checkpoint& ckpt, Backend* backend, const Fp8Config& fp8, WeightQuantization quant,
         std::vector<Buffer>* owned)
      : ckpt_(ckpt), backend_(backend), fp8_(fp8), quant_(quant), owned_(owned) {}
  Result<Tensor> get(const std::string& name, std::vector<int64_t> shape) {
    auto t = ckpt_.get(name, shape);
    if (!t.is_ok()) return t.status();
    return backend_->import_weight(t.value());
  }
  // Rows `span` of tensor `name` (full shape `shape`): a rank's column-parallel slice.
  Result<Tensor> get_rows(const std::string& name, std::vector<int64_t> shape, Span span) {
    auto t = ckpt_.get(name, shape);
    if (!t.is_ok()) return t.status();
    return backend_->import_weight(t->rows(span.begin, span.count));
  }
  // lm_head's vocabulary shard: rows `span` of [vocab, hidden], zero rows after them up to
  // `rows` (the last rank's padding).
  Result<Tensor> vocab_rows(const std::string& name, std::vector<int64_t> shape, Span span, int64_t rows) {
    auto t = ckpt_.get(name, shape);
    if (!t.is_ok()) return t.status();
    const Tensor part = t->rows(span.begin, span.count);
    if (span.count == rows) return backend_->import_weight(part);
    Tensor padded(host_memory(static_cast<size_t>(rows) * part.row_bytes()), part.dtype, {rows, part.dim(1)});
    std::memset(padded.data, 0, padded.bytes());
    std::memcpy(padded.data, part.data, part.bytes());
    return backend_->import_weight(padded);
  }
  // A projection weight: an FP8 checkpoint's e4m3 tensors, or a float one quantized to fp8
  // as it is loaded (--quantization fp8), through model/fp8_weights.h. rows / cols: the
  // rank's slice (a full span unsharded).
  Result<Tensor> projection(const std::string& name, int64_t rows, int64_t k, Span row_span, Span col_span) {
    auto probe = ckpt_.get(name, {rows, k}, /*allow_fp8=*/true);
    const bool sliced = row_span.count != rows || col_span.count != k;
    if (probe.is_ok() && probe->dtype == DType::kF8E4M3) {
      if (fp8_.scale == Fp8Config::Scale::kNone)
        return Status::error(name + " is F8_E4M3 but config.json has no FP8 quantization_config");
      if (sliced)
        return Status::error(name + ": FP8 checkpoints are not split across tensor-parallel ranks; "
                             "use --tensor-parallel-size 1, or the float checkpoint with --quantization fp8");
      return load_fp8_projection(ckpt_, name, probe.value(), fp8_, backend_, owned_);
    }
    if (!probe.is_ok()) return get(name, {rows, k});  // the float loader's error
    Tensor w = probe->rows(row_span.begin, row_span.count);
    if (col_span.count != k) w = columns(w, col_span);
    if (quant_ == WeightQuantization::kFp8) return quantize_fp8_projection(w, name, backend_, owned_);
    return backend_->import_weight(w);
  }

 private:
  // Host memory that lives as long as the weights where the backend uses host tensors in
  // place (host backends), else until the next call (a device backend uploads it first).
  void* host_memory(size_t bytes) {
    if (backend_->device() == Device::kCpu) {
      owned_->emplace_back(backend_, bytes);
      return owned_->back().data();
    }
    staging_.resize(bytes);
    return staging_.data();
  }
  // Columns `span` of a host [rows, k] tensor: a rank's row-parallel slice, copied.
  Tensor columns(const Tensor& t, Span span) {
    const size_t es = dtype_size(t.dtype), width = static_cast<size_t>(span.count) * es;
    Tensor out(host_memory(static_cast<size_t>(t.dim(0)) * width), t.dtype, {t.dim(0), span.count});
    for (int64_t r = 0; r < t.dim(0); ++r)
      std::memcpy(out.ptr<char>() + static_cast<size_t>(r) * width,
                  t.ptr<const char>() + static_cast<size_t>(r) * t.row_bytes() + static_cast<size_t>(span.begin) * es,
                  width);
    return out;
  }

  const Checkpoint& ckpt_;
  Backend* backend_;
  const Fp8Config& fp8_;
  WeightQuantization quant_;
  std::vector<Buffer>* owned_;
  std::vector<char> staging_;
};

// Re-lays each projection weight out in the order the backend multiplies it fastest in
// (Backend::projection_layout), into memory the weights own; an untied lm_head too, which
// only Backend::lm_head reads (a tied one is the embedding table, read by rows).
void pack_projections(LlamaWeights& w, Backend* backend) {
  const auto pack = [&](Tensor* t) {
    if (t->empty() || backend->projection_layout(*t) == WeightLayout::kRows) return;
    // A packed weight takes activations rounded to bf16 alone: int8 weights get those only
    // where they were quantized from bf16.
    if (!host_x_is_bf16(t->dtype, w.quantized_from)) return;
    Buffer packed(backend, t->bytes());
    const Tensor p = backend->pack_projection(packed.data(), *t);
    w.replace(t, p, std::move(packed));
  };
  for (auto& l : w.layers)
    for (Tensor* t : l.projections()) pack(t);
  if (w.lm_head.data != w.embed.data) pack(&w.lm_head);
}

// Puts each layer's q/k/v and gate/up weights back to back in one allocation, in that
// order, where the backend multiplies members of one width as one product
// (Backend::batches_adjacent_members): gate and up always share a width, k and v too, and
// q with them without grouped-query attention. Each member starts a multiple of 256 bytes
// into the allocation, so as aligned as an upload of its own (cudaMalloc: 256 bytes; the
// tensor-core kernels take 16-byte aligned rows).
void place_groups(LlamaWeights& w, Backend* backend) {
  if (!backend->batches_adjacent_members()) return;
  const auto place = [&](std::initializer_list<Tensor*> group) {
    const Tensor& first = **group.begin();
    size_t total = 0;
    for (const Tensor* t : group) {
      if (t->empty() || t->row_scale != nullptr || t->layout != WeightLayout::kRows || t->dtype != first.dtype ||
          t->device != backend->device())
        return;
      total += padded(t->bytes());
    }
    Buffer memory(backend, total);
    size_t at = 0;
    for (Tensor* t : group) {
      Tensor moved = *t;
      moved.data = static_cast<char*>(memory.data()) + at;
      backend->copy(moved.data, t->data, t->bytes());
      w.release(*t, backend);
      *t = moved;
      at += padded(t->bytes());
    }
    w.owned.push_back(std::move(memory));
  };
  for (auto& l : w.layers) {
    place({&l.wq, &l.wk, &l.wv});
    place({&l.w_gate, &l.w_up});
  }
}

}  // namespace

void LlamaWeights::release(const Tensor& t, Backend* backend) {
  if (!erase_owned(owned, t.data)) backend->release_weight(t);
}

void LlamaWeights::replace(Tensor* t, const Tensor& with, Buffer memory) {
  erase_owned(owned, t->data);
  *t = with;
  owned.push_back(std::move(memory));
}

size_t LlamaWeights::weight_bytes() const {
  size_t total = embed.bytes() + final_norm.bytes();
  if (lm_head.data != embed.data) total += lm_head.bytes();
  for (const auto& l : layers) {
    for (const Tensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv, &l.mlp_norm, &l.w_gate,
                            &l.w_up, &l.w_down})
      if (!t->empty()) total += t->bytes() + (t->row_scale ? static_cast<size_t>(t->dim(0)) * sizeof(float) : 0);
  }
  return total;
}

Result<LlamaWeights> load_llama_weights(const ModelConfig& c, std::shared_ptr<Checkpoint> checkpoint,
                                        Backend* backend, WeightQuantization quant,
                                        const std::function<void(int64_t, int64_t)>& progress, ShardSpec shard) {
  LlamaWeights w;
  if (c.fp8.scale != Fp8Config::Scale::kNone && quant == WeightQuantization::kInt8)
    return Status::error("--quantization int8 takes a float checkpoint; this one is already FP8 (quant_method " +
                         c.fp8.method + ")");
  // --quantization fp8 on an FP8 checkpoint keeps the checkpoint's own scales.
  Loader ld(*checkpoint, backend, c.fp8, quant, &w.owned);
  const ModelShard s = model_shard(c, shard);
  const int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), f = c.intermediate_size;
  const Span all_h{0, h};
  QV_ASSIGN_OR_RETURN(w.embed, ld.get("model.embed_tokens.weight", {c.vocab_size, h}));
  QV_ASSIGN_OR_RETURN(w.final_norm, ld.get("model.norm.weight", {h}));
  if (c.tie_word_embeddings && !shard.sharded()) {
    w.lm_head = w.embed;
  } else {
    const char* head = c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
    QV_ASSIGN_OR_RETURN(w.lm_head, ld.vocab_rows(head, {c.vocab_size, h}, s.vocab, s.vocab_rows));
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = layer_prefix(l);
    LayerWeights lw;
    QV_ASSIGN_OR_RETURN(lw.attn_norm, ld.get(p + "input_layernorm.weight", {h}));
    QV_ASSIGN_OR_RETURN(lw.wq, ld.projection(p + "self_attn.q_proj.weight", q, h, s.q, all_h));
    QV_ASSIGN_OR_RETURN(lw.wk, ld.projection(p + "self_attn.k_proj.weight", kv, h, s.kv, all_h));
    QV_ASSIGN_OR_RETURN(lw.wv, ld.projection(p + "self_attn.v_proj.weight", kv, h, s.kv, all_h));
    QV_ASSIGN_OR_RETURN(lw.wo, ld.projection(p + "self_attn.o_proj.weight", h, q, all_h, s.q));
    if (c.attention_bias) {
      QV_ASSIGN_OR_RETURN(lw.bq, ld.get_rows(p + "self_attn.q_proj.bias", {q}, s.q));
      QV_ASSIGN_OR_RETURN(lw.bk, ld.get_rows(p + "self_attn.k_proj.bias", {kv}, s.kv));
      QV_ASSIGN_OR_RETURN(lw.bv, ld.get_rows(p + "self_attn.v_proj.bias", {kv}, s.kv));
    }
    QV_ASSIGN_OR_RETURN(lw.mlp_norm, ld.get(p + "post_attention_layernorm.weight", {h}));
    QV_ASSIGN_OR_RETURN(lw.w_gate, ld.projection(p + "mlp.gate_proj.weight", f, h, s.inter, all_h));
    QV_ASSIGN_OR_RETURN(lw.w_up, ld.projection(p + "mlp.up_proj.weight", f, h, s.inter, all_h));
    QV_ASSIGN_OR_RETURN(lw.w_down, ld.projection(p + "mlp.down_proj.weight", h, f, all_h, s.inter));
    w.layers.push_back(lw);
    if (progress) progress(l + 1, c.num_layers);
  }
  w.checkpoint = std::move(checkpoint);
  if (quant == WeightQuantization::kFp8) w.quantized_from = c.dtype;
  if (quant == WeightQuantization::kInt8) QV_RETURN_IF_ERROR(quantize_projections_int8(w, backend));
  pack_projections(w, backend);
  place_groups(w, backend);
  return w;
}

LlamaWeights dummy_llama_weights(const ModelConfig& full, DType dtype, Backend* backend, uint64_t seed,
                                 WeightQuantization quant, ShardSpec shard) {
  LlamaWeights w;
  const ModelConfig c = shard_model_config(full, shard);
  uint64_t stream = splitmix64_hash(seed);  // each tensor gets its own stream
  // Every tensor is allocated on the backend and filled where it lives (a GPU fills its
  // own memory: no host copy, no upload). Replicated tensors come out the same on every
  // rank; a rank's shards (split) draw from a stream of their own.
  auto make = [&](std::initializer_list<int64_t> shape, float center, float scale, bool split = true) {
    Buffer buf(backend, Tensor(nullptr, dtype, shape).bytes());
    Tensor t(buf.data(), dtype, shape, backend->device());
    stream = splitmix64_hash(stream);
    const uint64_t own = split && shard.sharded() ? splitmix64_hash(stream + static_cast<uint64_t>(shard.rank)) : stream;
    backend->fill_uniform(t, center, scale, own);
    w.owned.push_back(std::move(buf));
    return t;
  };
  const int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), f = full.intermediate_size;
  const float s_in = 1.0f / std::sqrt(static_cast<float>(h)), s_f = 1.0f / std::sqrt(static_cast<float>(f));
  w.embed = make({c.vocab_size, h}, 0.f, 1.0f, false);
  w.final_norm = make({h}, 1.f, 0.1f, false);
  const int64_t head_rows = model_shard(full, shard).vocab_rows;
  w.lm_head = c.tie_word_embeddings && !shard.sharded() ? w.embed : make({head_rows, h}, 0.f, s_in);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    LayerWeights lw;
    lw.attn_norm = make({h}, 1.f, 0.1f, false);
    lw.wq = make({q, h}, 0.f, s_in);
    lw.wk = make({kv, h}, 0.f, s_in);
    lw.wv = make({kv, h}, 0.f, s_in);
    lw.wo = make({h, q}, 0.f, s_in);
    if (c.attention_bias) {
      lw.bq = make({q}, 0.f, 0.1f);
      lw.bk = make({kv}, 0.f, 0.1f);
      lw.bv = make({kv}, 0.f, 0.1f);
    }
    lw.mlp_norm = make({h}, 1.f, 0.1f, false);
    lw.w_gate = make({c.intermediate_size, h}, 0.f, s_in);
    lw.w_up = make({c.intermediate_size, h}, 0.f, s_in);
    lw.w_down = make({h, c.intermediate_size}, 0.f, s_f);
    w.layers.push_back(lw);
  }
  if (quant == WeightQuantization::kInt8) {
    const Status s = quantize_projections_int8(w, backend);
    check(s.is_ok(), s.message());  // random weights are finite
  }
  if (quant == WeightQuantization::kFp8) {
    w.quantized_from = dtype;
    const Status s = quantize_projections_fp8(w, backend);
    check(s.is_ok(), s.message());  // random weights are finite
  }
  pack_projections(w, backend);
  place_groups(w, backend);
  return w;
}

}  // namespace quiver
