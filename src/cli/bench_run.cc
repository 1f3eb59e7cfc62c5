// `quiver bench` drivers: timed engine steps with byte accounting, offline passes (all
// requests batched, or adapter by adapter), and the online loop that adds requests as
// their Poisson arrival times pass.
#include <chrono>
#include <cmath>
#include <map>
#include <random>
#include <thread>

#include "cli/bench.h"

namespace quiver::bench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

SamplingParams bench_params(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;  // greedy: sampling cost is an argmax, as in the peer measurements
  p.max_tokens = max_tokens;
  p.ignore_eos = true;   // every request generates exactly max_tokens
  return p;
}

Status submit(LLMEngine& engine, const BenchOptions& o, const BenchRequest& r, int max_tokens) {
  std::optional<LoRARequest> lora;
  if (!r.adapter.empty()) lora = LoRARequest{r.adapter, 0, ""};
  PromptInput prompt;
  prompt.token_ids = r.prompt;
  SamplingParams p = bench_params(max_tokens);
  if (r.constrained) p.structured_outputs = o.structured;
  return engine.add_request(r.id, prompt, p, lora).with_context("request " + r.id);
}

Status check_outputs(const std::vector<RequestOutput>& outs) {
  for (const RequestOutput& o : outs)
    if (!o.error.empty()) return Status::error("request " + o.request_id + " failed: " + o.error);
  return Status::ok();
}

}  // namespace

CostModel make_cost_model(const LLMEngine& engine) {
  const ModelConfig& c = engine.model_config();
  CostModel b;
  // A decode step gathers only a few rows of an untied input embedding table; the tied
  // table is read in full as the lm_head.
  b.weight_bytes = static_cast<double>(engine.weight_bytes()) -
                   (c.tie_word_embeddings ? 0.0 : static_cast<double>(engine.embedding_bytes()));
  if (engine.args().enable_lora) {
    // The slot stacks are float32 or bfloat16 (--lora-dtype) and rank-padded to max_lora_rank;
    // with any adapter in the batch the kernels run on all 7 targets (untargeted modules are
    // zero slices).
    double per_layer = 0;
    for (int t = 0; t < kNumLoraTargets; ++t)
      per_layer += static_cast<double>(lora_target_in(c, static_cast<LoraTarget>(t)) +
                                       lora_target_out(c, static_cast<LoraTarget>(t)));
    const double elem_bytes = engine.args().lora_dtype == "bfloat16" ? 2.0 : 4.0;
    b.adapter_bytes = per_layer * engine.args().max_lora_rank * elem_bytes * static_cast<double>(c.num_layers);
    b.adapter_flops_per_token = per_layer * engine.args().max_lora_rank * static_cast<double>(c.num_layers) * 2.0;
  }
  b.kv_bytes_per_position = 2.0 * static_cast<double>(c.num_layers * c.num_kv_heads * c.head_dim) *
                            static_cast<double>(dtype_size(engine.kv_cache_dtype()));
  const double h = static_cast<double>(c.hidden_size), q = static_cast<double>(c.q_size()),
               kv = static_cast<double>(c.kv_size()), f = static_cast<double>(c.intermediate_size),
               layers = static_cast<double>(c.num_layers);
  b.linear_flops_per_token = 2.0 * layers * (h * q + 2 * h * kv + q * h + 3 * h * f);
  b.lm_head_flops_per_row = 2.0 * static_cast<double>(c.vocab_size) * h;
  b.attn_flops_per_position = 4.0 * layers * q;
  return b;
}

std::vector<RequestOutput> timed_step(LLMEngine& engine, const CostModel& cost, PassStats* s) {
  const auto t0 = Clock::now();
  std::vector<RequestOutput> outs = engine.step();
  const double sec = seconds(t0, Clock::now());
  const StepStats& st = engine.last_step();
  s->total_s += sec;
  s->num_preempted += st.num_preempted;
  int64_t new_tokens = 0;
  for (const RequestOutput& o : outs)
    for (const CompletionOutput& c : o.outputs) new_tokens += static_cast<int64_t>(c.num_new_tokens);
  s->output_tokens += new_tokens;

  int64_t sampled = 0, sampled_with_adapter = 0;
  for (const RequestOutput& o : outs)
    for (const CompletionOutput& c : o.outputs)
      if (c.num_new_tokens > 0) {
        ++sampled;
        if (!o.lora_name.empty()) ++sampled_with_adapter;
      }

  if (st.num_prefill_tokens > 0 && st.num_decode_tokens == 0) {
    ++s->prefill_steps;
    s->prefill_tokens += st.num_prefill_tokens;
    s->prefill_s += sec;
    s->prefill_linear_flops += cost.linear_flops_per_token * st.num_prefill_tokens +
                               cost.lm_head_flops_per_row * static_cast<double>(sampled);
  } else if (st.num_prefill_tokens == 0 && st.num_decode_tokens > 0) {
    ++s->decode_steps;
    s->decode_tokens += st.num_decode_tokens;
    s->decode_s += sec;
    s->decode_step_ms.push_back(sec * 1e3);
    ++s->decode_paths[st.path];
    // Each sequence that decoded attended over its whole context: the prompt plus every
    // generated token but the one just sampled.
    int64_t positions = 0;
    for (const RequestOutput& o : outs)
      for (const CompletionOutput& c : o.outputs)
        if (c.num_new_tokens > 0)
          positions += static_cast<int64_t>(o.prompt_token_ids.size() + c.token_ids.size()) - 1;
    const double adapter = cost.adapter_bytes * static_cast<double>(st.adapters.size());
    const double kv = cost.kv_bytes_per_position * static_cast<double>(positions);
    s->decode_adapter_bytes += adapter;
    s->decode_kv_bytes += kv;
    s->decode_bytes += cost.weight_bytes + adapter + kv;
    s->decode_flops += (cost.linear_flops_per_token + cost.lm_head_flops_per_row) * st.num_decode_tokens +
                       cost.attn_flops_per_position * static_cast<double>(positions) +
                       cost.adapter_flops_per_token * static_cast<double>(sampled_with_adapter);
  } else if (st.num_prefill_tokens > 0) {
    ++s->mixed_steps;
    s->mixed_tokens += st.num_prefill_tokens + st.num_decode_tokens;
    s->mixed_s += sec;
  }
  return outs;
}

Result<PassStats> run_offline_pass(LLMEngine& engine, const BenchOptions& o, const CostModel& cost,
                                   const std::vector<BenchRequest>& requests, bool sequential) {
  // Groups in order of first appearance: one per adapter (base requests form their own)
  // when sequential, else a single group with everything.
  std::vector<std::vector<const BenchRequest*>> groups;
  std::map<std::string, size_t> group_of;
  for (const BenchRequest& r : requests) {
    const std::string key = sequential ? r.adapter : std::string();
    auto [it, fresh] = group_of.emplace(key, groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(&r);
  }
  PassStats s;
  for (const auto& group : groups) {
    for (const BenchRequest* r : group) QV_RETURN_IF_ERROR(submit(engine, o, *r, o.output_len));
    while (engine.has_unfinished_requests()) QV_RETURN_IF_ERROR(check_outputs(timed_step(engine, cost, &s)));
  }
  return s;
}

Status assign_arrivals(std::vector<BenchRequest>* requests, const std::string& rate, uint64_t seed) {
  if (rate == "inf") {
    for (BenchRequest& r : *requests) r.arrival_s = 0;
    return Status::ok();
  }
  double per_s = 0;
  try {
    size_t used = 0;
    per_s = std::stod(rate, &used);
    if (used != rate.size()) per_s = 0;
  } catch (const std::exception&) {
    per_s = 0;
  }
  if (!(per_s > 0) || !std::isfinite(per_s))
    return Status::error("--request-rate must be a positive number of requests per second or inf, not '" + rate + "'");
  // Exponential gaps (a Poisson process), the first request at 0, as vLLM's serving benchmark.
  std::mt19937_64 rng(seed * 7919 + 1);
  std::exponential_distribution<double> gap(per_s);
  double t = 0;
  for (size_t i = 0; i < requests->size(); ++i) {
    if (i > 0) t += gap(rng);
    (*requests)[i].arrival_s = t;
  }
  return Status::ok();
}

Result<OnlineStats> run_online(LLMEngine& engine, const BenchOptions& o, const CostModel& cost,
                               const std::vector<BenchRequest>& requests) {
  struct Track {
    double arrival_s = 0;
    double last_token_s = -1;
  };
  std::map<std::string, Track> tracks;
  OnlineStats r;
  r.num_requests = static_cast<int>(requests.size());
  const auto start = Clock::now();
  size_t next = 0;
  while (next < requests.size() || engine.has_unfinished_requests()) {
    const double now = seconds(start, Clock::now());
    // Latencies count from the scheduled arrival, so time a request waits for the
    // running step to end is part of its TTFT, as a client would see it.
    for (; next < requests.size() && requests[next].arrival_s <= now; ++next) {
      QV_RETURN_IF_ERROR(submit(engine, o, requests[next], o.output_len));
      tracks[requests[next].id].arrival_s = requests[next].arrival_s;
    }
    if (!engine.has_unfinished_requests()) {
      if (next < requests.size())
        std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(requests[next].arrival_s)));
      continue;
    }
    std::vector<RequestOutput> outs = timed_step(engine, cost, &r.steps);
    QV_RETURN_IF_ERROR(check_outputs(outs));
    const double t = seconds(start, Clock::now());
    for (const RequestOutput& out : outs) {
      Track& tr = tracks[out.request_id];
      const size_t k = out.outputs.empty() ? 0 : out.outputs[0].num_new_tokens;
      if (k > 0) {
        if (tr.last_token_s < 0) {
          r.ttft_ms.push_back((t - tr.arrival_s) * 1e3);
          // Further tokens of the same step share its end time: gaps of zero.
          for (size_t j = 1; j < k; ++j) r.itl_ms.push_back(0);
        } else {
          r.itl_ms.push_back((t - tr.last_token_s) * 1e3);
          for (size_t j = 1; j < k; ++j) r.itl_ms.push_back(0);
        }
        tr.last_token_s = t;
      }
      if (out.finished) {
        r.e2e_ms.push_back((t - tr.arrival_s) * 1e3);
        r.duration_s = std::max(r.duration_s, t);
      }
    }
  }
  return r;
}

}  // namespace quiver::bench
