// `quiver generate`: offline batch mode (vLLM's LLM.generate). Every request of the input
// file is submitted before the first step, so all of them — whatever their adapters —
// are batched together. One output line per input line, in input order.
#include <fstream>
#include <iostream>
#include <map>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/generate_io.h"

namespace quiver {

namespace {

struct GenerateOptions {
  EngineFlags engine;
  std::string input;
  std::string output;
};

int run_generate(GenerateOptions& o) {
  Status s = finalize_engine_flags(&o.engine);
  if (!s.is_ok()) {
    std::cerr << "quiver generate: " << s.message() << "\n";
    return 2;
  }
  std::ifstream in(o.input);
  if (!in) {
    std::cerr << "quiver generate: cannot read --input " << o.input << "\n";
    return 2;
  }
  auto created = LLMEngine::create(o.engine.args);
  if (!created.is_ok()) {
    std::cerr << "quiver generate: " << created.message() << "\n";
    return 1;
  }
  LLMEngine& engine = *created.value();

  std::vector<std::string> order;                  // request ids by input line
  std::map<std::string, nlohmann::json> results;   // id -> output line
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto req = parse_generate_request(line, line_no);
    std::string id = req.is_ok() ? req->id : generate_request_id(line, line_no);
    if (results.count(id) || std::find(order.begin(), order.end(), id) != order.end()) {
      const std::string dup = id;
      id = "line-" + std::to_string(line_no);
      order.push_back(id);
      results[id] = generate_error_json(dup, "duplicate request id '" + dup + "'");
      continue;
    }
    order.push_back(id);
    if (!req.is_ok()) {
      results[id] = generate_error_json(id, req.message());
      continue;
    }
    std::optional<LoRARequest> lora;
    if (req->lora.has_value()) lora = LoRARequest{*req->lora, 0, ""};
    Status added = req->beam.has_value() ? engine.add_beam_search(id, req->prompt, *req->beam, lora, req->priority)
                                         : engine.add_request(id, req->prompt, req->params, lora, req->priority);
    if (!added.is_ok()) results[id] = generate_error_json(id, added.message());
  }
  while (engine.has_unfinished_requests()) {
    for (const RequestOutput& out : engine.step())
      if (out.finished)
        results[out.request_id] =
            out.error.empty() ? generate_output_json(out) : generate_error_json(out.request_id, out.error);
  }
  std::ofstream outf(o.output);
  if (!outf) {
    std::cerr << "quiver generate: cannot write --output " << o.output << "\n";
    return 2;
  }
  for (const auto& id : order) outf << results[id].dump() << "\n";
  return 0;
}

}  // namespace

void register_generate(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "run a JSONL file of requests, all batched together");
  add_engine_flags(cmd, &opts->engine);
  cmd->add_option("--input", opts->input, "requests, one JSON object per line")->required();
  cmd->add_option("--output", opts->output, "results, one JSON object per line")->required();
  cmd->callback([opts, exit_code] { *exit_code = run_generate(*opts); });
}

}  // namespace quiver
