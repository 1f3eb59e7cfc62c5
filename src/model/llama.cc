#include "model/llama.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace quiver {

Workspace::Workspace(Backend* b, const ModelConfig& c, DType x16, int max_tokens_, int max_lora_rank)
    : max_tokens(max_tokens_),
      q_size(c.q_size()),
      kv_size(c.kv_size()),
      intermediate(c.intermediate_size),
      hidden(b, sizeof(float) * max_tokens_ * c.hidden_size),
      residual(b, sizeof(float) * max_tokens_ * c.hidden_size),
      normed(b, sizeof(float) * max_tokens_ * c.hidden_size),
      qkv(b, sizeof(float) * max_tokens_ * (c.q_size() + 2 * c.kv_size())),
      gate_up(b, sizeof(float) * max_tokens_ * 2 * c.intermediate_size),
      attn_out(b, sizeof(float) * max_tokens_ * c.q_size()),
      lora_tmp(b, sizeof(float) * kMaxGroup * max_tokens_ * std::max(1, max_lora_rank)),
      selected(b, sizeof(float) * max_tokens_ * c.hidden_size) {
  if (x16 != DType::kF32) {  // a 16-bit copy or an fp8 one, whichever the step's plan asks for
    auto copy_bytes = [&](int64_t d) { return std::max(size_t{2} * max_tokens_ * d, fp8_copy_bytes(max_tokens_, d)); };
    normed16 = Buffer(b, copy_bytes(c.hidden_size));
    gate16 = Buffer(b, copy_bytes(c.intermediate_size));
  }
}

size_t Workspace::bytes() const {
  size_t n = 0;
  for (const Buffer* b : {&hidden, &residual, &normed, &qkv, &attn_out, &gate_up, &normed16, &gate16, &lora_tmp,
                          &selected, &head_part, &head_all})
    n += b->bytes();
  return n;
}

LlamaModel::LlamaModel(ModelConfig config, LlamaWeights weights, Backend* backend, int64_t max_positions,
                       Communicator* comm)
    : config_(std::move(config)), weights_(std::move(weights)), backend_(backend), comm_(comm) {
  const int64_t world = comm_ ? comm_->world() : 1;
  check(weights_.lm_head.dim(0) * world >= config_.vocab_size, "LlamaModel: lm_head shards smaller than the vocabulary");
  const int64_t hd = config_.head_dim;
  std::vector<float> table(static_cast<size_t>(max_positions * hd));
  rope_cos_sin_table(config_, max_positions, table.data());
  rope_table_ = Buffer(backend_, table.size() * sizeof(float));
  backend_->copy_from_host(rope_table_.data(), table.data(), table.size() * sizeof(float));
  cos_sin_ = rope_table_.tensor(DType::kF32, {max_positions, hd});
}

StepShape LlamaModel::step_shape(int64_t tokens, bool lora, const LoraSlotPool* pool) const {
  const ModelConfig& c = config_;
  StepShape s;
  s.tokens = tokens;
  s.weights = linear_dtype();
  s.weights_source = weights_.quantized_from;
  s.lora = lora && pool != nullptr;
  if (s.lora) {
    s.stacks = pool->dtype();
    s.rank = pool->max_rank();
  }
  s.group[static_cast<int>(ProjGroup::kQkv)] = {3, c.hidden_size, {c.q_size(), c.kv_size(), c.kv_size()}};
  s.group[static_cast<int>(ProjGroup::kO)] = {1, c.q_size(), {c.hidden_size}};
  s.group[static_cast<int>(ProjGroup::kGateUp)] = {2, c.hidden_size, {c.intermediate_size, c.intermediate_size}};
  s.group[static_cast<int>(ProjGroup::kDown)] = {1, c.intermediate_size, {c.hidden_size}};
  return s;
}

GroupLora LlamaModel::group_lora(const GroupPlan& plan, ProjGroup g, std::initializer_list<Tensor> ys, int layer,
                                 const StepTensors& step, Workspace& ws, const LoraSlotPool* lora) const {
  GroupLora gl;
  if (!plan.lora()) return gl;
  check(lora != nullptr, "forward: the plan runs LoRA without a slot pool");
  static constexpr LoraTarget kTargets[kNumProjGroups][kMaxGroup] = {
      {LoraTarget::kQ, LoraTarget::kK, LoraTarget::kV},
      {LoraTarget::kO},
      {LoraTarget::kGate, LoraTarget::kUp},
      {LoraTarget::kDown}};
  for (const Tensor& y : ys) {
    const LoraTarget target = kTargets[static_cast<int>(g)][gl.count];
    gl.y[gl.count] = y;
    gl.a_stack[gl.count] = lora->a_stack(layer, target);
    gl.b_stack[gl.count] = lora->b_stack(layer, target);
    ++gl.count;
  }
  gl.t = ws.lora_tmp.tensor(DType::kF32, {kMaxGroup, step.num_tokens, lora->max_rank()});
  gl.meta = step.lora;
  return gl;
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

void LlamaModel::all_reduce(Tensor y, const GroupPlan& plan, const GroupLora& lora) const {
  if (comm_ == nullptr) return;
  // Where the next op adds the LoRA expand, it adds B @ t on every rank to the summed
  // outputs: t, each rank's shrink over its input columns, is summed with them (one group,
  // [n, rank] floats beside [n, hidden]). Otherwise project added B @ t_rank to y already.
  if (plan.expand_in_next_op() && lora.count > 0) comm_->all_reduce_sum({y, lora.t_of(0)});
  else comm_->all_reduce_sum({y});
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
  Tensor q = ws.q(n), k = ws.k(n), v = ws.v(n);
  Tensor attn = ws.attn_out.tensor(DType::kF32, {n, c.q_size()});
  Tensor gate = ws.gate(n), up = ws.up(n);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const StepPlan& plan = step.plan;
  check(plan.tokens == n, "forward: the step's plan is for another token count");
  const GroupPlan &qkv = plan[ProjGroup::kQkv], &o = plan[ProjGroup::kO], &gate_up = plan[ProjGroup::kGateUp],
                  &down = plan[ProjGroup::kDown];
  // The copies of the q/k/v, gate/up and down inputs in the type the plan multiplies them
  // in, 16-bit or e4m3 (the norms and silu_mul write them); the o input is left to the backend.
  check(qkv.x_type == gate_up.x_type, "forward: q/k/v and gate/up read one normed copy");
  auto copy = [&](const Buffer& buf, DType t, int64_t d) {
    if (t == DType::kF32 || buf.data() == nullptr) return Tensor();
    return t == DType::kF8E4M3 ? buf.fp8_copy_view(n, d) : buf.tensor(t, {n, d});
  };
  const Tensor normed16 = copy(ws.normed16, qkv.x_type, c.hidden_size);
  const Tensor gate16 = copy(ws.gate16, down.x_type, c.intermediate_size);

  backend_->embedding(hidden, weights_.embed, step.embed_extra, step.token_ids);
  // Inside every LoRA graph, like the projections' LoRA: slots without an embed_tokens LoRA
  // are skipped on the device (rank 0), not by a host decision frozen at capture.
  if (step.lora_active && lora != nullptr)
    backend_->embedding_lora(hidden, step.lora_ids, step.lora.token_slot, lora->vocab_tables().lora);
  backend_->rms_norm(normed, normed16, hidden, weights_.layers[0].attn_norm, eps);
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = weights_.layers[l];
    const GroupLora qkv_lora = group_lora(qkv, ProjGroup::kQkv, {q, k, v}, l, step, ws, lora);
    backend_->project(qkv, group({{q, w.wq, w.bq}, {k, w.wk, w.bk}, {v, w.wv, w.bv}}, normed16), qkv_lora, normed);
    Tensor q3 = q.view({n, c.num_heads, c.head_dim});
    Tensor k3 = k.view({n, c.num_kv_heads, c.head_dim});
    Tensor v3 = v.view({n, c.num_kv_heads, c.head_dim});
    const KvLayer& cache = kv.layers[static_cast<size_t>(l)];
    backend_->rope_kv_write(q3, k3, v3, step.positions, cos_sin_, cache, step.slot_mapping, qkv, qkv_lora);
    backend_->attention(attn.view({n, c.num_heads, c.head_dim}), q3, cache, step.attn, scale);

    const GroupLora o_lora = group_lora(o, ProjGroup::kO, {branch}, l, step, ws, lora);
    backend_->project(o, group({{branch, w.wo, Tensor()}}), o_lora, attn);
    all_reduce(branch, o, o_lora);
    backend_->add_rms_norm(normed, normed16, hidden, branch, w.mlp_norm, eps, o, o_lora);

    const GroupLora gate_up_lora = group_lora(gate_up, ProjGroup::kGateUp, {gate, up}, l, step, ws, lora);
    backend_->project(gate_up, group({{gate, w.w_gate, Tensor()}, {up, w.w_up, Tensor()}}, normed16), gate_up_lora,
                      normed);
    backend_->silu_mul(gate, gate16, gate, up, gate_up, gate_up_lora);

    const GroupLora down_lora = group_lora(down, ProjGroup::kDown, {branch}, l, step, ws, lora);
    backend_->project(down, group({{branch, w.w_down, Tensor()}}, gate16), down_lora, gate);
    all_reduce(branch, down, down_lora);
    // The final norm feeds lm_head's rows, not a group: no 16-bit copy.
    const bool last = l + 1 == c.num_layers;
    backend_->add_rms_norm(normed, last ? Tensor() : normed16, hidden, branch,
                           last ? weights_.final_norm : weights_.layers[l + 1].attn_norm, eps, down, down_lora);
  }
  if (step.num_logit_rows > 0) {
    Tensor sel = ws.selected.tensor(DType::kF32, {step.num_logit_rows, c.hidden_size});
    backend_->gather_rows(sel, normed, step.logit_rows);
  }
}

Tensor LlamaModel::selected(const Workspace& ws, int row_begin, int rows) const {
  return ws.selected.tensor(DType::kF32, {row_begin + rows, config_.hidden_size}).rows(row_begin, rows);
}

void LlamaModel::size_head_buffers(Workspace& ws, int64_t rows) const {
  if (comm_ == nullptr) return;
  const int64_t part = rows * weights_.lm_head.dim(0);
  ws.head_part = Buffer(backend_, sizeof(float) * static_cast<size_t>(part));
  ws.head_all = Buffer(backend_, sizeof(float) * static_cast<size_t>(part * comm_->world()));
}

void LlamaModel::lm_head(Tensor logits, const Workspace& ws, int row_begin, int rows) const {
  if (comm_ == nullptr) {
    backend_->lm_head(logits, selected(ws, row_begin, rows), weights_.lm_head);
    return;
  }
  // Each rank multiplies its vocabulary rows; the gathered shards [world, rows, shard] are
  // then laid side by side as the columns of logits (the last shard's padding dropped).
  const int64_t shard = weights_.lm_head.dim(0), vocab = config_.vocab_size, world = comm_->world();
  check(logits.ndim == 2 && logits.dim(0) == rows && logits.dim(1) == vocab, "lm_head: logits must be [rows, vocab]");
  const Tensor part = ws.head_part.tensor(DType::kF32, {rows, shard});
  const Tensor all = ws.head_all.tensor(DType::kF32, {world, rows, shard});
  backend_->lm_head(part, selected(ws, row_begin, rows), weights_.lm_head);
  comm_->all_gather(all, part);
  const size_t f = sizeof(float);
  for (int64_t r = 0; r < world; ++r) {
    const int64_t cols = std::min(shard, vocab - r * shard);
    if (cols <= 0) break;
    backend_->copy_2d(logits.ptr<float>() + r * shard, vocab * f, all.ptr<float>() + r * rows * shard, shard * f,
                      cols * f, rows);
  }
}

}  // namespace quiver
