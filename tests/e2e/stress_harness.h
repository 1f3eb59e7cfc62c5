// Randomized differential stress of LLMEngine's add_request / step: requests with prompts of
// 1..1000 tokens, random adapters (and none), greedy and seeded sampling, arriving at random
// steps into engines with random settings (prefill chunk budget, max_num_seqs, KV cache
// size, block size, max_loras, prefix caching, graphs or eager). Every request's tokens must
// equal the same request run alone on the same device, and greedy ones the CPU's, except
// where the CPU's own top-2 margin is below `margin` (a legitimate tie between devices).
// A failure is shrunk (fewer companion requests, then a shorter prompt) before it is
// reported, so the message shows the smallest case that still fails.
//
// The model is the llama_gqa fixture (f32, GQA, 9 PEFT adapters of every kind) with its
// max_position_embeddings raised to kMaxModelLen in a scratch copy: random weights need no
// HF reference for this, only agreement with themselves and with the CPU.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "e2e/longer_fixture.h"
#include "engine/llm_engine.h"

namespace quiver::stress {

namespace fs = std::filesystem;

inline constexpr int kMaxModelLen = 1100;
inline constexpr int kMaxPrompt = 1000;

struct Request {
  std::string id;
  std::vector<int32_t> prompt;
  std::string lora;  // "" = base model
  int max_tokens = 8;
  bool greedy = true;
  uint64_t seed = 0;  // seeded sampling when !greedy
  int arrival = 0;    // the engine step before which it is added
};

// One engine configuration of a round.
struct Settings {
  std::string device = "cpu";
  int max_num_batched_tokens = 2048;
  int max_num_seqs = 256;
  int num_kv_blocks = 0;
  int block_size = 16;
  int max_loras = 8;
  bool prefix_caching = true;
  bool eager = false;

  std::string describe() const {
    std::ostringstream s;
    s << device << " chunk=" << max_num_batched_tokens << " seqs=" << max_num_seqs << " kv_blocks=" << num_kv_blocks
      << " block=" << block_size << " loras=" << max_loras << " prefix=" << prefix_caching
      << (device != "cuda" ? "" : eager ? " eager" : " graphs");
    return s.str();
  }
};

struct Result {
  std::vector<int32_t> tokens;
  std::vector<double> margins;  // top-1 minus top-2 logprob per generated token
  std::string error;
};
using Results = std::map<std::string, Result>;

// The fixture copy: links to llama_gqa's weights and adapters, its own config.json.
inline const fs::path& model_dir() {
  static const fs::path dir = testing::longer_fixture("llama_gqa", kMaxModelLen);
  return dir;
}

inline std::vector<std::string> adapter_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(model_dir() / "adapters")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

inline EngineArgs engine_args(const Settings& s) {
  EngineArgs a;
  a.model = model_dir().string();
  a.device = s.device;
  a.threads = 1;  // results must not depend on threads; one keeps the CI machine's other core free
  a.enable_lora = true;
  a.max_loras = s.max_loras;
  a.max_lora_rank = 64;
  a.max_cpu_loras = 16;
  a.max_num_seqs = s.max_num_seqs;
  a.max_num_batched_tokens = s.max_num_batched_tokens;
  a.max_model_len = kMaxModelLen;
  a.block_size = s.block_size;
  a.num_kv_blocks = s.num_kv_blocks;
  a.enable_prefix_caching = s.prefix_caching;
  a.enforce_eager = s.eager;
  for (const auto& n : adapter_names()) a.lora_modules.emplace_back(n, (model_dir() / "adapters" / n).string());
  return a;
}

inline SamplingParams params_of(const Request& q) {
  SamplingParams p;
  p.max_tokens = q.max_tokens;
  p.ignore_eos = true;
  p.logprobs = 2;
  if (q.greedy) {
    p.temperature = 0;
  } else {
    p.temperature = 0.8f;
    p.top_p = 0.9f;
    p.seed = q.seed;
  }
  return p;
}

// Runs `reqs` through `engine`, adding each at its arrival step (relative to the first step
// of this call).
inline void run_on(LLMEngine& engine, const std::vector<Request>& reqs, Results* out) {
  std::vector<const Request*> order;
  for (const Request& q : reqs) order.push_back(&q);
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->arrival < b->arrival; });
  size_t next = 0;
  for (int step = 0; next < order.size() || engine.has_unfinished_requests(); ++step) {
    for (; next < order.size() && order[next]->arrival <= step; ++next) {
      const Request& q = *order[next];
      PromptInput prompt;
      prompt.token_ids = q.prompt;
      std::optional<LoRARequest> lora;
      if (!q.lora.empty()) lora = LoRARequest{q.lora, 0, ""};
      const Status st = engine.add_request(q.id, prompt, params_of(q), lora);
      if (!st.is_ok()) (*out)[q.id].error = "add_request: " + st.message();
    }
    if (!engine.has_unfinished_requests()) continue;
    for (const RequestOutput& o : engine.step()) {
      if (!o.finished) continue;
      Result& r = (*out)[o.request_id];
      r.tokens = o.outputs[0].token_ids;
      for (const TokenLogprobs& lp : o.outputs[0].logprobs)
        r.margins.push_back(lp.top.size() >= 2 ? lp.top[0].second - lp.top[1].second : 1e9);
    }
    if (step > 1000000) break;  // a hang: the missing results report it
  }
  for (const Request& q : reqs)
    if (!out->count(q.id)) (*out)[q.id].error = "no result";
}

// `reqs` through one engine of settings s. An engine that cannot be created gives every
// request that error.
inline Results run(const Settings& s, const std::vector<Request>& reqs) {
  Results out;
  auto created = LLMEngine::create(engine_args(s));
  if (!created.is_ok()) {
    for (const Request& q : reqs) out[q.id].error = "engine: " + created.message();
    return out;
  }
  run_on(*created.value(), reqs, &out);
  return out;
}

// Each request alone, one after another, through one default engine on `device` (prefix
// caching off, so no request sees another's blocks).
inline Results run_alone(const std::string& device, const std::vector<Request>& reqs, bool eager = false) {
  Settings s;
  s.device = device;
  s.prefix_caching = false;
  s.eager = eager;
  Results out;
  auto created = LLMEngine::create(engine_args(s));
  for (Request q : reqs) {
    if (!created.is_ok()) {
      out[q.id].error = "engine: " + created.message();
      continue;
    }
    q.arrival = 0;
    run_on(*created.value(), {q}, &out);
  }
  return out;
}

// "" when `got` agrees with the references for request q, else what differs.
inline std::string compare(const Request& q, const Result& got, const Result& alone, const Result* cpu, double margin) {
  if (!got.error.empty()) return got.error;
  if (!alone.error.empty()) return "alone: " + alone.error;
  if (got.tokens != alone.tokens) {
    size_t i = 0;
    while (i < got.tokens.size() && i < alone.tokens.size() && got.tokens[i] == alone.tokens[i]) ++i;
    std::ostringstream why;
    why << "differs from the same request alone at token " << i;
    return why.str();
  }
  if (cpu != nullptr && q.greedy) {
    if (!cpu->error.empty()) return "cpu: " + cpu->error;
    for (size_t i = 0; i < got.tokens.size() && i < cpu->tokens.size(); ++i) {
      if (got.tokens[i] == cpu->tokens[i]) continue;
      if (cpu->margins[i] >= margin) {
        std::ostringstream why;
        why << "differs from the CPU at token " << i << " (CPU margin " << cpu->margins[i] << ")";
        return why.str();
      }
      break;  // a tie: the continuations may differ
    }
  }
  return "";
}

inline std::string describe(const Request& q) {
  std::ostringstream s;
  s << q.id << " (prompt " << q.prompt.size() << " tokens, lora '" << q.lora << "', ";
  if (q.greedy) s << "greedy";
  else s << "seed " << q.seed;
  s << ", max_tokens " << q.max_tokens << ", arrival " << q.arrival << ")";
  return s.str();
}

inline Request random_request(std::mt19937_64& rng, const std::string& id, const std::vector<std::string>& adapters,
                              int max_arrival) {
  Request q;
  q.id = id;
  // Half the prompts short (decode-heavy batches), half up to kMaxPrompt (many chunks).
  const int len = rng() % 2 ? 1 + static_cast<int>(rng() % 32) : 1 + static_cast<int>(rng() % kMaxPrompt);
  for (int j = 0; j < len; ++j) q.prompt.push_back(static_cast<int32_t>(rng() % 512));
  const size_t pick = rng() % (adapters.size() + 2);  // two chances in 11 of the base model
  q.lora = pick < adapters.size() ? adapters[pick] : "";
  q.max_tokens = 1 + static_cast<int>(rng() % 16);
  q.greedy = rng() % 4 != 0;
  q.seed = rng();
  q.arrival = static_cast<int>(rng() % (max_arrival + 1));
  return q;
}

inline Settings random_settings(std::mt19937_64& rng, const std::string& device) {
  static const int kChunks[] = {1, 3, 8, 16, 33, 64, 256, 2048};
  static const int kSeqs[] = {1, 2, 3, 8, 32, 256};
  static const int kBlocks[] = {1, 4, 16};
  static const int kLoras[] = {1, 2, 4, 8};
  Settings s;
  s.device = device;
  s.max_num_batched_tokens = kChunks[rng() % std::size(kChunks)];
  s.max_num_seqs = kSeqs[rng() % std::size(kSeqs)];
  s.block_size = kBlocks[rng() % std::size(kBlocks)];
  s.max_loras = kLoras[rng() % std::size(kLoras)];
  s.prefix_caching = rng() % 2 == 0;
  s.eager = device == "cuda" && rng() % 2 == 0;
  // A third of the rounds get a cache of little more than one longest sequence: preemption.
  const int per_seq = (kMaxModelLen + s.block_size - 1) / s.block_size;
  if (rng() % 3 == 0) s.num_kv_blocks = per_seq + static_cast<int>(rng() % (per_seq / 2 + 1));
  return s;
}

// The smallest failing case for request `target` of round (s, reqs): first fewer companion
// requests (halving while it still fails), then a shorter prompt. Returns its description.
inline std::string shrink(const Settings& s, std::vector<Request> reqs, const std::string& target,
                          const std::string& cpu_device, double margin) {
  auto fails = [&](const std::vector<Request>& rs) {
    const Request& q = *std::find_if(rs.begin(), rs.end(), [&](const Request& r) { return r.id == target; });
    const Results got = run(s, rs);
    const Results alone = run_alone(s.device, {q});
    const Results cpu = cpu_device.empty() ? Results() : run_alone(cpu_device, {q});
    return !compare(q, got.at(q.id), alone.at(q.id), cpu.empty() ? nullptr : &cpu.at(q.id), margin).empty();
  };
  bool progress = true;
  while (progress && reqs.size() > 1) {
    progress = false;
    std::vector<Request> others, keep;
    for (const Request& r : reqs) (r.id == target ? keep : others).push_back(r);
    const size_t half = others.size() / 2;
    for (int side = 0; side < 2 && !progress; ++side) {
      std::vector<Request> trial = keep;
      trial.insert(trial.end(), others.begin() + (side ? half : 0), side ? others.end() : others.begin() + half);
      if (trial.size() < reqs.size() && fails(trial)) {
        reqs = trial;
        progress = true;
      }
    }
    if (!progress && others.size() == 1 && fails(keep)) {
      reqs = keep;
      progress = true;
    }
  }
  for (Request& r : reqs) {
    if (r.id != target) continue;
    while (r.prompt.size() > 1) {
      Request shorter = r;
      shorter.prompt.resize(r.prompt.size() / 2);
      std::vector<Request> trial = reqs;
      for (Request& t : trial)
        if (t.id == target) t = shorter;
      if (!fails(trial)) break;
      r = shorter;
    }
  }
  std::ostringstream out;
  out << "smallest failing case: " << s.describe() << ";";
  for (const Request& r : reqs) out << " " << describe(r) << (r.id == target ? " <- fails" : "");
  return out.str();
}

struct Counts {
  int requests = 0, greedy = 0, sampled = 0, rounds = 0, failures = 0;
};

// `rounds` rounds of `per_round` requests on `device`; greedy results also checked against
// `cpu_device` ("" for none). Failures are reported as test failures with their shrunk case.
inline Counts stress(const std::string& device, const std::string& cpu_device, int rounds, int per_round, uint64_t seed,
                     double margin) {
  std::mt19937_64 rng(seed);
  const std::vector<std::string> adapters = adapter_names();
  Counts c;
  for (int round = 0; round < rounds; ++round) {
    const Settings s = random_settings(rng, device);
    std::vector<Request> reqs;
    for (int i = 0; i < per_round; ++i) {
      char id[32];
      std::snprintf(id, sizeof(id), "r%d_%d", round, i);
      reqs.push_back(random_request(rng, id, adapters, 3 * per_round));
    }
    const Results got = run(s, reqs);
    const Results alone = run_alone(device, reqs, s.eager);
    const Results cpu = cpu_device.empty() ? Results() : run_alone(cpu_device, reqs);
    ++c.rounds;
    for (const Request& q : reqs) {
      ++c.requests;
      ++(q.greedy ? c.greedy : c.sampled);
      const std::string why = compare(q, got.at(q.id), alone.at(q.id), cpu.empty() ? nullptr : &cpu.at(q.id), margin);
      if (why.empty()) continue;
      ++c.failures;
      if (c.failures <= 3) {  // shrinking costs many runs: the first few failures only
        ADD_FAILURE() << describe(q) << " under " << s.describe() << ": " << why << "\n  "
                      << shrink(s, reqs, q.id, cpu_device, margin);
      } else {
        ADD_FAILURE() << describe(q) << " under " << s.describe() << ": " << why;
      }
    }
  }
  std::printf("stress %s: %d requests (%d greedy, %d seeded) in %d rounds, %d failed\n", device.c_str(), c.requests,
              c.greedy, c.sampled, c.rounds, c.failures);
  return c;
}

}  // namespace quiver::stress
