#include "model/llama.h"

#include <array>
#include <cmath>

namespace quiver {

Workspace::Workspace(Backend* b, const ModelConfig& c, DType linear_dtype, int max_tokens_, int max_lora_rank)
    : max_tokens(max_tokens_),
      hidden(b, sizeof(float) * max_tokens_ * c.hidden_size),
      residual(b, sizeof(float) * max_tokens_ * c.hidden_size),
      normed(b, sizeof(float) * max_tokens_ * c.hidden_size),
      q(b, sizeof(float) * max_tokens_ * c.q_size()),
      k(b, sizeof(float) * max_tokens_ * c.kv_size()),
      v(b, sizeof(float) * max_tokens_ * c.kv_size()),
      attn_out(b, sizeof(float) * max_tokens_ * c.q_size()),
      gate(b, sizeof(float) * max_tokens_ * c.intermediate_size),
      up(b, sizeof(float) * max_tokens_ * c.intermediate_size),
      lora_tmp(b, sizeof(float) * max_tokens_ * std::max(1, max_lora_rank)),
      selected(b, sizeof(float) * max_tokens_ * c.hidden_size) {
  // gemm_input_type only turns 16-bit above some token count, so max_tokens decides.
  if (b->gemm_input_type(max_tokens_, linear_dtype) != DType::kF32) {
    normed16 = Buffer(b, size_t{2} * max_tokens_ * c.hidden_size);
    gate16 = Buffer(b, size_t{2} * max_tokens_ * c.intermediate_size);
  }
}

LlamaModel::LlamaModel(ModelConfig config, LlamaWeights weights, Backend* backend, int64_t max_positions)
    : config_(std::move(config)), weights_(std::move(weights)), backend_(backend) {
  const int64_t hd = config_.head_dim;
  std::vector<float> table(static_cast<size_t>(max_positions * hd));
  rope_cos_sin_table(config_, max_positions, table.data());
  rope_table_ = Buffer(backend_, table.size() * sizeof(float));
  backend_->copy_from_host(rope_table_.data(), table.data(), table.size() * sizeof(float));
  cos_sin_ = rope_table_.tensor(DType::kF32, {max_positions, hd});
}

void LlamaModel::project(const MatmulGroup& g, const LoraTarget* targets, Tensor x, int layer,
                         const StepTensors& step, Workspace& ws, const LoraSlotPool* lora,
                         LoraDelta* pending) const {
  pending->count = 0;
  if (lora == nullptr || !step.lora_active) {
    backend_->matmul_group(g, x);
    return;
  }
  LoraGroup lg;
  lg.count = g.count;
  for (int i = 0; i < g.count; ++i) {
    lg.y[i] = g.y[i];
    lg.a_stack[i] = lora->a_stack(layer, targets[i]);
    lg.b_stack[i] = lora->b_stack(layer, targets[i]);
  }
  const Tensor t = ws.lora_tmp.tensor(DType::kF32, {x.dim(0), lora->max_rank()});
  backend_->project(g, &lg, x, t, step.lora, pending);
}

// A group of `count` projections of one input, members listed as (y, w, bias); x16: the
// input's 16-bit copy, or empty (MatmulGroup::x16).
static MatmulGroup group(std::initializer_list<std::array<Tensor, 3>> members, Tensor x16 = Tensor()) {
  MatmulGroup g;
  g.x16 = x16;
  for (const auto& [y, w, bias] : members) {
    g.y[g.count] = y;
    g.w[g.count] = w;
    g.bias[g.count] = bias;
    ++g.count;
  }
  return g;
}

void LlamaModel::forward(const StepTensors& step, Workspace& ws, const KvCacheView& kv,
                         const LoraSlotPool* lora) const {
  const ModelConfig& c = config_;
  const int64_t n = step.num_tokens;
  check(n > 0 && n <= ws.max_tokens, "forward: token count outside the workspace");
  const float eps = static_cast<float>(c.rms_norm_eps);
  Tensor hidden = ws.hidden.tensor(DType::kF32, {n, c.hidden_size});      // the residual stream
  Tensor normed = ws.normed.tensor(DType::kF32, {n, c.hidden_size});
  Tensor branch = ws.residual.tensor(DType::kF32, {n, c.hidden_size});    // attention / MLP output
  Tensor q = ws.q.tensor(DType::kF32, {n, c.q_size()});
  Tensor k = ws.k.tensor(DType::kF32, {n, c.kv_size()});
  Tensor v = ws.v.tensor(DType::kF32, {n, c.kv_size()});
  Tensor attn = ws.attn_out.tensor(DType::kF32, {n, c.q_size()});
  Tensor gate = ws.gate.tensor(DType::kF32, {n, c.intermediate_size});
  Tensor up = ws.up.tensor(DType::kF32, {n, c.intermediate_size});
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  // The 16-bit copies of the q/k/v, gate/up and down inputs, when the backend's matmuls
  // want them (Backend::gemm_input_type), else empty (the *_x16 ops are then the plain
  // ones). The o input is left to the backend to convert.
  const DType x16 = backend_->gemm_input_type(n, linear_dtype());
  const bool fold = x16 != DType::kF32 && ws.normed16.data() != nullptr;
  const Tensor normed16 = fold ? ws.normed16.tensor(x16, {n, c.hidden_size}) : Tensor();
  const Tensor gate16 = fold ? ws.gate16.tensor(x16, {n, c.intermediate_size}) : Tensor();

  backend_->embedding(hidden, weights_.embed, step.token_ids);
  backend_->rms_norm_x16(normed, normed16, hidden, weights_.layers[0].attn_norm, eps);
  LoraDelta pending;  // a projection's LoRA term left to the op after it (Backend::project)
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = weights_.layers[l];
    static constexpr LoraTarget kQkv[] = {LoraTarget::kQ, LoraTarget::kK, LoraTarget::kV};
    static constexpr LoraTarget kO[] = {LoraTarget::kO};
    static constexpr LoraTarget kGateUp[] = {LoraTarget::kGate, LoraTarget::kUp};
    static constexpr LoraTarget kDown[] = {LoraTarget::kDown};
    project(group({{q, w.wq, w.bq}, {k, w.wk, w.bk}, {v, w.wv, w.bv}}, normed16), kQkv, normed, l, step, ws, lora,
            &pending);
    Tensor q3 = q.view({n, c.num_heads, c.head_dim});
    Tensor k3 = k.view({n, c.num_kv_heads, c.head_dim});
    Tensor v3 = v.view({n, c.num_kv_heads, c.head_dim});
    backend_->rope_kv_write(q3, k3, v3, step.positions, cos_sin_, kv.k[l], kv.v[l], step.slot_mapping, pending);
    backend_->attention(attn.view({n, c.num_heads, c.head_dim}), q3, kv.k[l], kv.v[l], step.attn, scale);
    project(group({{branch, w.wo, Tensor()}}), kO, attn, l, step, ws, lora, &pending);
    backend_->add_rms_norm_x16(normed, normed16, hidden, branch, w.mlp_norm, eps, pending);
    project(group({{gate, w.w_gate, Tensor()}, {up, w.w_up, Tensor()}}, normed16), kGateUp, normed, l, step, ws, lora,
            &pending);
    backend_->silu_mul_x16(gate, gate16, gate, up, pending);
    project(group({{branch, w.w_down, Tensor()}}, gate16), kDown, gate, l, step, ws, lora, &pending);
    // The final norm feeds lm_head's rows, not a group: no 16-bit copy.
    const bool last = l + 1 == c.num_layers;
    backend_->add_rms_norm_x16(normed, last ? Tensor() : normed16, hidden, branch,
                               last ? weights_.final_norm : weights_.layers[l + 1].attn_norm, eps, pending);
  }
  if (step.num_logit_rows > 0) {
    Tensor sel = ws.selected.tensor(DType::kF32, {step.num_logit_rows, c.hidden_size});
    backend_->gather_rows(sel, normed, step.logit_rows);
  }
}

void LlamaModel::lm_head(Tensor logits, const Workspace& ws, int row_begin, int rows) const {
  Tensor sel = ws.selected.tensor(DType::kF32, {row_begin + rows, config_.hidden_size}).rows(row_begin, rows);
  backend_->matmul(logits, sel, weights_.lm_head, Tensor());
}

}  // namespace quiver
