// multilora_inference: vLLM's examples/multilora_inference.py in C++.
// Builds an engine with LoRA enabled, submits the same prompts to the base model and to
// every adapter in one go — so they are batched together — drives step() and prints each
// RequestOutput as it finishes, with the logprobs of its first tokens, then a summary.
//
//   multilora_inference --model models/demo/base --adapters models/demo/adapters [--device cpu|cuda]
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "engine/llm_engine.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using namespace quiver;

namespace {

struct Options {
  std::string model = "models/demo/base";
  std::string adapters = "models/demo/adapters";
  std::string device = "auto";
  int max_tokens = 48;
};

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&](std::string* v) {
      if (i + 1 >= argc) return false;
      *v = argv[++i];
      return true;
    };
    std::string v;
    if (a == "--model" && next(&v)) o->model = v;
    else if (a == "--adapters" && next(&v)) o->adapters = v;
    else if (a == "--device" && next(&v)) o->device = v;
    else if (a == "--max-tokens" && next(&v)) o->max_tokens = std::stoi(v);
    else {
      std::fprintf(stderr, "usage: %s [--model DIR] [--adapters DIR] [--device auto|cpu|cuda] [--max-tokens N]\n", argv[0]);
      return false;
    }
  }
  return true;
}

std::string one_line(std::string s) {
  for (auto& c : s)
    if (c == '\n' || c == '\t') c = ' ';
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!parse(argc, argv, &opt)) return 2;

  EngineArgs args;
  args.model = opt.model;
  args.enable_lora = true;
  args.max_lora_rank = 16;
  args.max_num_seqs = 64;
  std::vector<std::string> names;
  if (fs::is_directory(opt.adapters))
    for (const auto& e : fs::directory_iterator(opt.adapters))
      if (fs::exists(e.path() / "adapter_config.json")) {
        names.push_back(e.path().filename().string());
        args.lora_modules.emplace_back(names.back(), e.path().string());
      }
  std::sort(names.begin(), names.end());
  std::sort(args.lora_modules.begin(), args.lora_modules.end());
  args.max_loras = std::max<int>(1, static_cast<int>(names.size()));
  args.max_cpu_loras = args.max_loras;

  // The GPU when this build has one and a device is present, the CPU otherwise.
  std::unique_ptr<LLMEngine> engine;
  for (const std::string& dev : opt.device == "auto" ? std::vector<std::string>{"cuda", "cpu"}
                                                    : std::vector<std::string>{opt.device}) {
    args.device = dev;
    auto created = LLMEngine::create(args);
    if (created.is_ok()) {
      engine = std::move(created).value();
      break;
    }
    if (opt.device != "auto" || dev == "cpu") {
      std::fprintf(stderr, "multilora_inference: %s\n", created.message().c_str());
      return 1;
    }
  }
  if (engine->tokenizer() == nullptr) {
    std::fprintf(stderr, "multilora_inference: %s has no tokenizer.json\n", opt.model.c_str());
    return 1;
  }
  std::printf("model %s on %s, adapters:", opt.model.c_str(), engine->backend()->name().c_str());
  for (const auto& n : names) std::printf(" %s", n.c_str());
  std::printf("\n\n");

  // The text-to-SQL example vLLM users meet first, a sentence for a rewriting adapter,
  // and a plain chat turn: every prompt goes to the base model and to every adapter.
  const std::vector<std::string> questions = {
      "Write a SQL query to answer the question based on the table schema.\n\n context: CREATE TABLE "
      "table_name_74 (icao VARCHAR, airport VARCHAR)\n\n question: Name the ICAO for lilongwe airport",
      "Write a SQL query to answer the question based on the table schema.\n\n context: CREATE TABLE "
      "table_name_11 (country VARCHAR, capital VARCHAR)\n\n question: What is the country whose capital is nairobi?",
      "Hello my friend, are you ready for the treasure?",
      "Tell me a fortune.",
  };
  std::vector<std::string> adapters = {""};
  adapters.insert(adapters.end(), names.begin(), names.end());

  SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = opt.max_tokens;
  params.logprobs = 1;
  params.stop = {"[/assistant]"};
  std::map<std::string, std::pair<std::string, std::string>> what;  // id -> (adapter, question)
  int n = 0;
  for (const auto& q : questions) {
    auto rendered = engine->tokenizer()->apply_chat_template(nlohmann::json::array({{{"role", "user"}, {"content", q}}}), true);
    if (!rendered.is_ok()) {
      std::fprintf(stderr, "chat template: %s\n", rendered.message().c_str());
      return 1;
    }
    for (const auto& a : adapters) {
      const std::string id = "req-" + std::to_string(n++);
      std::optional<LoRARequest> lora;
      if (!a.empty()) lora = LoRARequest{a, 0, ""};
      PromptInput prompt;
      prompt.text = rendered.value();
      Status s = engine->add_request(id, prompt, params, lora);
      if (!s.is_ok()) {
        std::fprintf(stderr, "%s: %s\n", id.c_str(), s.message().c_str());
        return 1;
      }
      what[id] = {a.empty() ? "base" : a, q};
    }
  }

  const auto t0 = std::chrono::steady_clock::now();
  size_t tokens = 0;
  std::vector<std::pair<std::string, RequestOutput>> done;
  while (engine->has_unfinished_requests()) {
    for (RequestOutput& out : engine->step()) {
      if (!out.finished) continue;
      const auto& c = out.outputs[0];
      tokens += c.token_ids.size();
      std::printf("RequestOutput(id=%s, lora=%s, finish_reason=%s, tokens=%zu)\n  prompt: %s\n  output: %s\n  logprobs:",
                  out.request_id.c_str(), what[out.request_id].first.c_str(), c.finish_reason.c_str(),
                  c.token_ids.size(), one_line(what[out.request_id].second).substr(0, 90).c_str(),
                  one_line(c.text).c_str());
      for (size_t i = 0; i < std::min<size_t>(4, c.logprobs.size()); ++i)
        std::printf(" %d:%.3f", c.logprobs[i].token, c.logprobs[i].logprob);
      std::printf("\n\n");
      done.emplace_back(out.request_id, std::move(out));
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::printf("summary: %zu requests, %zu adapters + base, all in one batch; %zu tokens in %.2f s = %.1f tokens/s\n",
              done.size(), names.size(), tokens, secs, tokens / secs);
  std::printf("%-8s | %s\n", "adapter", "output (first question)");
  for (const auto& a : adapters) {
    for (const auto& [id, out] : done) {
      if (what[id].first == (a.empty() ? "base" : a) && what[id].second == questions[0]) {
        std::printf("%-8s | %s\n", what[id].first.c_str(), one_line(out.outputs[0].text).c_str());
      }
    }
  }
  return 0;
}
