// `quiver verify`: runs the same requests twice — with decode graphs, then with
// --enforce-eager — in two engines one after the other, and reports per request whether
// the tokens are identical, the first position where they differ, and the largest
// |Δ logprob| over the generated positions (every request is forced to logprobs >= 5, and
// positions are compared up to the first differing token, after which contexts diverge).
// Padded decode runs the same kernels on the same shapes in both modes, so anything but
// exact equality is a bug (DESIGN.md §2). Exit code 1 if anything differs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/generate_io.h"

namespace quiver {

namespace {

struct VerifyOptions {
  EngineFlags engine;
  std::string input;
  int min_logprobs = 5;
  double tolerance = 0.0;  // largest |Δ logprob| still reported as identical
};

struct RunResult {
  std::map<std::string, RequestOutput> outputs;  // finished requests by id
  std::map<std::string, std::string> errors;     // id -> message
  std::map<std::string, int> paths;              // step path -> count
  int graphs = 0;
};

// Runs every request in one engine, all submitted before the first step.
Result<RunResult> run_all(const EngineArgs& args, const std::vector<Result<GenerateRequest>>& requests) {
  QV_ASSIGN_OR_RETURN(auto engine, LLMEngine::create(args));
  RunResult r;
  r.graphs = engine->graph_info().num_graphs;
  for (const auto& req : requests) {
    if (!req.is_ok()) continue;
    std::optional<LoRARequest> lora;
    if (req->lora.has_value()) lora = LoRARequest{*req->lora, 0, ""};
    Status added = engine->add_request(req->id, req->prompt, req->params, lora);
    if (!added.is_ok()) r.errors[req->id] = added.message();
  }
  while (engine->has_unfinished_requests()) {
    for (RequestOutput& out : engine->step())
      if (out.finished) r.outputs[out.request_id] = std::move(out);
    const std::string& p = engine->last_step().path;
    // "graph bs=8" -> "graph", "eager bs=8 (padded)" -> "eager padded", "eager".
    if (!p.empty()) ++r.paths[p.substr(0, p.find(' ')) + (p.find("padded") != std::string::npos ? " padded" : "")];
  }
  return r;
}

struct Comparison {
  bool identical = true;
  int first_diff = -1;      // first generated position whose token differs, -1 if none
  double max_delta = 0;     // over compared positions and the tokens both top-K lists hold
  int positions = 0;        // positions compared
};

Comparison compare(const CompletionOutput& a, const CompletionOutput& b, double tolerance) {
  Comparison c;
  const size_t n = std::min(a.token_ids.size(), b.token_ids.size());
  for (size_t i = 0; i < n; ++i) {
    if (i < a.logprobs.size() && i < b.logprobs.size()) {
      // The distributions at position i have the same context up to the first difference.
      std::map<int32_t, float> lb;
      for (const auto& [t, lp] : b.logprobs[i].top) lb[t] = lp;
      lb[b.logprobs[i].token] = b.logprobs[i].logprob;
      auto delta = [&](int32_t t, float lp) {
        auto it = lb.find(t);
        if (it != lb.end()) c.max_delta = std::max(c.max_delta, static_cast<double>(std::fabs(lp - it->second)));
      };
      for (const auto& [t, lp] : a.logprobs[i].top) delta(t, lp);
      delta(a.logprobs[i].token, a.logprobs[i].logprob);
      ++c.positions;
    }
    if (a.token_ids[i] != b.token_ids[i]) {
      c.first_diff = static_cast<int>(i);
      break;
    }
  }
  if (c.first_diff < 0 && a.token_ids.size() != b.token_ids.size()) c.first_diff = static_cast<int>(n);
  c.identical = c.first_diff < 0 && c.max_delta <= tolerance;
  return c;
}

std::string paths_string(const RunResult& r) {
  std::string s;
  for (const auto& [p, n] : r.paths) s += (s.empty() ? "" : ", ") + p + " " + std::to_string(n);
  return s.empty() ? "no steps" : s;
}

int run_verify(VerifyOptions& o) {
  Status s = finalize_engine_flags(&o.engine);
  if (!s.is_ok()) {
    std::cerr << "quiver verify: " << s.message() << "\n";
    return 2;
  }
  std::ifstream in(o.input);
  if (!in) {
    std::cerr << "quiver verify: cannot read --input " << o.input << "\n";
    return 2;
  }
  std::vector<Result<GenerateRequest>> requests;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto req = parse_generate_request(line, line_no);
    if (req.is_ok()) req->params.logprobs = std::max(req->params.logprobs, o.min_logprobs);
    requests.push_back(std::move(req));
  }

  EngineArgs graph_args = o.engine.args, eager_args = o.engine.args;
  graph_args.enforce_eager = false;
  eager_args.enforce_eager = true;
  auto graph = run_all(graph_args, requests);
  if (!graph.is_ok()) {
    std::cerr << "quiver verify: " << graph.message() << "\n";
    return 1;
  }
  auto eager = run_all(eager_args, requests);
  if (!eager.is_ok()) {
    std::cerr << "quiver verify: " << eager.message() << "\n";
    return 1;
  }
  if (graph->graphs == 0)
    std::printf("note: device '%s' captured no graphs: both runs are eager (padded decode in both), so this "
                "checks eager against eager\n", o.engine.args.device.c_str());
  std::printf("graph run: %d graphs, steps by path: %s\neager run: steps by path: %s\n", graph->graphs,
              paths_string(graph.value()).c_str(), paths_string(eager.value()).c_str());

  int total = 0, same = 0, failed = 0;
  double worst = 0;
  for (size_t k = 0; k < requests.size(); ++k) {
    const auto& req = requests[k];
    if (!req.is_ok()) {
      std::printf("line %zu  error: %s\n", k + 1, req.message().c_str());
      ++failed;
      continue;
    }
    const std::string& id = req->id;
    const std::string lora = req->lora.value_or("-");
    auto g = graph->outputs.find(id), e = eager->outputs.find(id);
    if (g == graph->outputs.end() || e == eager->outputs.end()) {
      const std::string err = graph->errors.count(id) ? graph->errors.at(id) : eager->errors.count(id) ? eager->errors.at(id) : "no output";
      std::printf("%s  lora=%s  error: %s\n", id.c_str(), lora.c_str(), err.c_str());
      ++failed;
      continue;
    }
    for (size_t c = 0; c < g->second.outputs.size() && c < e->second.outputs.size(); ++c) {
      const Comparison cmp = compare(g->second.outputs[c], e->second.outputs[c], o.tolerance);
      ++total;
      same += cmp.identical;
      worst = std::max(worst, cmp.max_delta);
      const std::string name = g->second.outputs.size() > 1 ? id + "[" + std::to_string(c) + "]" : id;
      std::printf("%s  lora=%s  tokens identical: %s  first diff: %s  max |dlogprob|: %.3e over %d positions (%zu tokens)\n",
                  name.c_str(), lora.c_str(), cmp.first_diff < 0 ? "yes" : "no",
                  cmp.first_diff < 0 ? "-" : std::to_string(cmp.first_diff).c_str(), cmp.max_delta, cmp.positions,
                  g->second.outputs[c].token_ids.size());
    }
  }
  const bool ok = same == total && failed == 0;
  std::printf("verify: %d/%d completions identical (graph vs eager), max |dlogprob| %.3e, %d errors, device %s: %s\n",
              same, total, worst, failed, o.engine.args.device.c_str(), ok ? "OK" : "DIFFERENT");
  return ok ? 0 : 1;
}

}  // namespace

void register_verify(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<VerifyOptions>();
  CLI::App* cmd = app.add_subcommand("verify", "run requests with decode graphs and eagerly; report any difference");
  add_engine_flags(cmd, &opts->engine);
  cmd->add_option("--input", opts->input, "requests, one JSON object per line (as quiver generate)")->required();
  cmd->add_option("--min-logprobs", opts->min_logprobs, "top-K logprobs compared per position (at least)");
  cmd->add_option("--tolerance", opts->tolerance, "largest |dlogprob| counted as identical (default 0: bitwise)");
  cmd->callback([opts, exit_code] { *exit_code = run_verify(*opts); });
}

}  // namespace quiver
