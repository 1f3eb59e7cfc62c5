// `quiver bench`: offline latency/throughput (batch of B requests, prefill and decode
// tok/s, decode step latency, achieved memory bandwidth against a stated ceiling), the
// same with synthesized LoRA adapters (batched or adapter by adapter), and an online
// load mode (Poisson arrivals; TTFT, inter-token and end-to-end latency). Device-agnostic:
// the engine flags pick cpu or cuda. See bench/RESULTS.md for recorded runs.
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>

#include "cli/bench.h"
#include "cli/commands.h"
#include "structured/request_fields.h"

namespace quiver {

namespace {

using namespace bench;

// A fresh folder under the system temp dir, removed with everything in it at the end.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "quiver_bench_XXXXXX").string();
    if (mkdtemp(tmpl.data())) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

Status validate(const BenchOptions& o) {
  if (o.batch_size < 1) return Status::error("--batch-size must be at least 1");
  if (o.input_len < 1) return Status::error("--input-len must be at least 1");
  if (o.output_len < 1) return Status::error("--output-len must be at least 1");
  if (o.num_adapters < 0) return Status::error("--num-adapters must be >= 0");
  if (o.num_iters < 1) return Status::error("--num-iters must be at least 1");
  if (o.warmup_steps < 0) return Status::error("--warmup-steps must be >= 0");
  if (!(o.lora_fraction >= 0 && o.lora_fraction <= 1)) return Status::error("--lora-fraction must be in [0, 1]");
  if (o.num_requests < 0) return Status::error("--num-requests must be >= 0");
  if (o.sequential_adapters && o.num_requests > 0)
    return Status::error("--sequential-adapters is an offline mode; drop --num-requests");
  if (!o.compare.empty() && o.compare != "base" && o.compare != "sequential" && o.compare != "structured")
    return Status::error("--compare must be base, sequential or structured, not '" + o.compare + "'");
  if (o.compare == "structured" && !o.structured.active())
    return Status::error("--compare structured needs --structured-outputs");
  if (!o.compare.empty() && o.num_requests > 0) return Status::error("--compare is an offline mode; drop --num-requests");
  if (o.compare == "base" && o.num_adapters == 0) return Status::error("--compare base needs --num-adapters");
  if (o.compare == "sequential" && o.sequential_adapters)
    return Status::error("--compare sequential compares against --sequential-adapters; give only one");
  if (o.num_requests > 0) {
    std::vector<BenchRequest> none;
    QV_RETURN_IF_ERROR(assign_arrivals(&none, o.request_rate, 0));  // checks the rate before the model loads
  }
  if (o.mem_bandwidth_gbs < 0) return Status::error("--mem-bandwidth-gbs must be positive");
  return Status::ok();
}

// The start-up memory plan (memory_plan.h), in GiB and tokens.
nlohmann::json memory_json(const MemoryReport& r) {
  const double gib = double(int64_t{1} << 30);
  return {{"weights_gib", double(r.weights) / gib},
          {"lora_slots_gib", double(r.lora_slots) / gib},
          {"activations_gib", double(r.activations) / gib},
          {"graphs_gib", double(r.graphs) / gib},
          {"kv_cache_gib", double(r.kv_cache) / gib},
          {"kv_tokens", r.kv_tokens},
          {"max_concurrency", r.max_concurrency()},
          {"kv_source", r.kv_source}};
}

nlohmann::json options_json(const BenchOptions& o, const LLMEngine& engine) {
  const EngineArgs& a = engine.args();
  return {{"model", a.model},
          {"load_format", a.load_format},
          {"dtype", a.dtype},
          {"device", a.device},
          {"threads", a.threads},
          {"seed", a.seed},
          {"batch_size", o.batch_size},
          {"input_len", o.input_len},
          {"output_len", o.output_len},
          {"num_adapters", o.num_adapters},
          {"lora_rank", o.lora_rank},
          {"lora_targets", o.lora_targets},
          {"lora_file_dtype", o.lora_dtype},
          {"lora_vocab", o.lora_vocab},
          {"lora_dtype", a.lora_dtype},
          {"lora_fraction", o.lora_fraction},
          {"sequential_adapters", o.sequential_adapters},
          {"compare", o.compare},
          {"structured_outputs", o.structured_outputs},
          {"num_requests", o.num_requests},
          {"request_rate", o.request_rate},
          {"num_iters", o.num_iters},
          {"warmup_steps", o.warmup_steps},
          {"max_loras", a.enable_lora ? a.max_loras : 0},
          {"max_lora_rank", a.max_lora_rank},
          {"max_num_seqs", a.max_num_seqs},
          {"max_num_batched_tokens", a.max_num_batched_tokens},
          {"enforce_eager", a.enforce_eager},
          {"kv_cache_dtype", std::string(dtype_name(engine.kv_cache_dtype()))},
          {"gpu_memory_utilization", a.gpu_memory_utilization},
          {"memory", memory_json(engine.memory_report())}};
}

// The read rate the CPU kernels stream at over the engine's threads, measured now (the ref
// backend measures nothing, so a cpu backend of as many threads measures it).
double host_read_gbs(LLMEngine& engine) {
  double gbs = engine.backend()->measure_read_gbs();
  if (gbs <= 0) {
    std::string err;
    auto probe = make_backend(BackendOptions{.kind = "cpu", .num_threads = engine.args().threads}, &err);
    gbs = probe ? probe->measure_read_gbs() : 0;
  }
  check(gbs > 0, "bench: the host's read rate could not be measured; give --mem-bandwidth-gbs");
  return gbs;
}

// The bandwidth ceiling decode steps are held against, and how it was obtained:
// --mem-bandwidth-gbs; on the host, host_read_gbs; on CUDA, the GPU's device-to-device copy
// rate measured now (DESIGN.md section 5), times the GPUs of tensor parallelism, or the
// H200's 4,260 GB/s where the copy's 512 MiB are not free.
struct Ceiling {
  double gbs;
  std::string how;
  bool measured;  // host_read_gbs: worth measuring again after the passes
};
Ceiling bandwidth_ceiling(LLMEngine& engine, const BenchOptions& o) {
  if (o.mem_bandwidth_gbs > 0) return {o.mem_bandwidth_gbs, "--mem-bandwidth-gbs", false};
  const int gpus = engine.args().tensor_parallel_size;
  if (engine.backend()->device() == Device::kCuda) {
    const double copy = engine.backend()->measure_read_gbs();
    const std::string times = gpus == 1 ? "" : " x " + std::to_string(gpus) + " GPUs";
    if (copy > 0) return {copy * gpus, "device-to-device copy measured at start" + times, false};
    return {4260.0 * gpus, "the H200's measured copy rate (no memory free to measure this GPU's)" + times, false};
  }
  const int threads = engine.args().threads;
  return {host_read_gbs(engine),
          "streaming read measured at start, " + (threads > 0 ? std::to_string(threads) : std::string("all")) +
              " threads",
          true};
}

// One measured offline pass over fresh prompts (the prefix cache never hits), printed.
Result<nlohmann::json> measured_pass(LLMEngine& engine, const BenchOptions& o, const std::vector<std::string>& adapters,
                                     const CostModel& cost, double bandwidth, bool base, bool sequential,
                                     bool constrained, uint64_t seed, const std::string& tag) {
  const std::vector<std::string> none;
  auto reqs = make_requests(o.batch_size, o.input_len, base ? none : adapters, o.lora_fraction,
                            engine.model_config().vocab_size, seed, tag + "-");
  constrained = constrained && o.structured.active();
  for (BenchRequest& r : reqs) r.constrained = constrained;
  QV_ASSIGN_OR_RETURN(PassStats r, run_offline_pass(engine, o, cost, reqs, sequential));
  char label[200];
  std::snprintf(label, sizeof(label), "offline %s%s%s: batch %d, input %d, output %d  [%s]",
                base || adapters.empty() ? "base model" : "with adapters", sequential ? ", adapter by adapter" : "",
                constrained ? ", structured outputs" : "", o.batch_size, o.input_len,
                o.output_len, tag.c_str());
  print_pass(label, r, cost, bandwidth);
  return pass_json(r, cost, bandwidth);
}

double ratio(const nlohmann::json& a, const nlohmann::json& b, const char* part, const char* key,
             const char* sub = nullptr) {
  const double x = sub ? a[part][key][sub].get<double>() : a[part][key].get<double>();
  const double y = sub ? b[part][key][sub].get<double>() : b[part][key].get<double>();
  return y > 0 ? x / y : 0.0;
}

Status run_offline_iterations(LLMEngine& engine, const BenchOptions& o, const std::vector<std::string>& adapters,
                              const CostModel& cost, double bandwidth, nlohmann::json* record) {
  const bool base_main = adapters.empty();
  std::vector<double> decode_rates;
  std::map<std::string, std::vector<double>> ratios;  // main / compare, per iteration
  nlohmann::json iters = nlohmann::json::array(), compares = nlohmann::json::array();
  size_t best = 0;
  for (int it = 0; it < o.num_iters; ++it) {
    const uint64_t seed = engine.args().seed + 2 * static_cast<uint64_t>(it);
    const std::string n = std::to_string(it + 1) + "/" + std::to_string(o.num_iters);
    nlohmann::json main, cmp;
    auto run_main = [&]() -> Status {
      QV_ASSIGN_OR_RETURN(main, measured_pass(engine, o, adapters, cost, bandwidth, base_main, o.sequential_adapters,
                                              true, seed, "iteration " + n));
      return Status::ok();
    };
    auto run_cmp = [&]() -> Status {
      QV_ASSIGN_OR_RETURN(cmp, measured_pass(engine, o, adapters, cost, bandwidth, base_main || o.compare == "base",
                                             o.compare == "sequential", o.compare != "structured", seed + 1,
                                             "comparison " + n));
      return Status::ok();
    };
    if (o.compare.empty()) {
      QV_RETURN_IF_ERROR(run_main());
    } else if (it % 2 == 0) {
      QV_RETURN_IF_ERROR(run_main());
      QV_RETURN_IF_ERROR(run_cmp());
    } else {
      QV_RETURN_IF_ERROR(run_cmp());
      QV_RETURN_IF_ERROR(run_main());
    }
    iters.push_back(main);
    decode_rates.push_back(main["decode"]["tokens_per_s"].get<double>());
    if (decode_rates.back() > decode_rates[best]) best = decode_rates.size() - 1;
    if (!o.compare.empty()) {
      compares.push_back(cmp);
      ratios["decode_tokens_per_s"].push_back(ratio(main, cmp, "decode", "tokens_per_s"));
      ratios["output_tokens_per_s"].push_back(ratio(main, cmp, "end_to_end", "output_tokens_per_s"));
      ratios["decode_step_ms_p50"].push_back(ratio(main, cmp, "decode", "step_ms", "p50"));
      ratios["decode_step_ms_min"].push_back(ratio(main, cmp, "decode", "step_ms", "min"));
      // What the step-time ratio cannot go below at the memory-bandwidth limit: e.g. every
      // request on its own adapter adds the batch's adapter bytes to each step.
      ratios["decode_bytes_per_step"].push_back(ratio(main, cmp, "decode", "bytes_per_step"));
    }
  }
  (*record)["iterations"] = iters;
  (*record)["best"] = iters[best];  // least disturbed by other load on a shared machine
  (*record)["median_decode_tokens_per_s"] = percentile(decode_rates, 50);
  if (o.num_iters > 1)
    std::printf("decode tok/s over %d iterations: best %.2f, median %.2f\n", o.num_iters, decode_rates[best],
                percentile(decode_rates, 50));
  if (!o.compare.empty()) {
    (*record)["compare"] = o.compare;
    (*record)["compare_iterations"] = compares;
    nlohmann::json med;
    for (const auto& [k, v] : ratios) med[k] = {{"per_iteration", v}, {"median", percentile(v, 50)}};
    (*record)["ratio_main_over_compare"] = med;
    std::printf("main / %s, median of %d: decode tok/s x%.3f, output tok/s x%.3f, decode step p50 x%.3f, min x%.3f "
                "(bytes per decode step x%.3f)\n",
                o.compare.c_str(), o.num_iters, percentile(ratios["decode_tokens_per_s"], 50),
                percentile(ratios["output_tokens_per_s"], 50), percentile(ratios["decode_step_ms_p50"], 50),
                percentile(ratios["decode_step_ms_min"], 50), percentile(ratios["decode_bytes_per_step"], 50));
  }
  return Status::ok();
}

int fail(const std::string& message, int code) {
  std::cerr << "quiver bench: " << message << "\n";
  return code;
}

// --structured-outputs into o->structured, read as the structured_outputs field of a request.
Status finalize_structured(BenchOptions* o) {
  if (o->structured_outputs.empty()) return Status::ok();
  nlohmann::ordered_json body;
  try {
    body["structured_outputs"] = nlohmann::ordered_json::parse(o->structured_outputs);
  } catch (const nlohmann::json::exception& e) {
    return Status::error(std::string("--structured-outputs is not JSON: ") + e.what());
  }
  std::string field;
  QV_ASSIGN_OR_RETURN(o->structured, structured::read_structured_fields(body, &field));
  return Status::ok();
}

int run_bench(BenchOptions& o, const CLI::App* cmd) {
  Status s = finalize_structured(&o);
  if (s.is_ok()) s = validate(o);
  if (s.is_ok()) s = finalize_engine_flags(&o.engine);
  if (!s.is_ok()) return fail(s.message(), 2);
  EngineArgs& args = o.engine.args;
  const bool online = o.num_requests > 0;
  const int concurrent = online ? o.num_requests : o.batch_size;
  if (o.num_adapters > 0) {
    // Enough device slots for every adapter a batch can hold, unless the user says otherwise.
    args.enable_lora = true;
    if (cmd->count("--max-loras") == 0) args.max_loras = std::max(1, std::min(o.num_adapters, concurrent));
    if (cmd->count("--max-lora-rank") == 0) args.max_lora_rank = o.lora_rank;
    if (cmd->count("--max-cpu-loras") == 0) args.max_cpu_loras = std::max(args.max_loras, o.num_adapters);
  }

  auto config = load_model_config(args.model);
  if (!config.is_ok()) return fail(config.message(), 1);
  auto vocab_rows = vocab_rows_of(o.lora_vocab, config.value());
  if (!vocab_rows.is_ok()) return fail(vocab_rows.message(), 2);
  if (o.num_adapters > 0 && vocab_rows.value() > 0) {
    // Slot rows (and new ids) enough for the synthesized adapters, unless the user says otherwise.
    const int64_t added = vocab_rows.value() - (o.lora_vocab == "lm_head" ? config->vocab_size : 0);
    if (cmd->count("--max-lora-vocab-rows") == 0) args.max_lora_vocab_rows = vocab_rows.value();
    if (cmd->count("--lora-extra-vocab-size") == 0) args.lora_extra_vocab_size = std::max<int64_t>(256, added);
  }
  TempDir temp_dir;
  const std::string adapter_dir = o.adapter_dir.empty() ? temp_dir.path() : o.adapter_dir;
  std::vector<std::string> adapters;
  if (o.num_adapters > 0) {
    if (adapter_dir.empty()) return fail("cannot create a temp folder for the adapters", 1);
    auto made = synthesize_adapters(config.value(), o, adapter_dir);
    if (!made.is_ok()) return fail(made.message(), 1);
    for (auto& [name, path] : made.value()) {
      args.lora_modules.emplace_back(name, path);
      adapters.push_back(name);
    }
  }
  auto created = LLMEngine::create(args);
  if (!created.is_ok()) return fail(created.message(), 1);
  LLMEngine& engine = *created.value();
  const CostModel cost = make_cost_model(engine);
  const Ceiling ceiling = bandwidth_ceiling(engine, o);
  const double bandwidth = ceiling.gbs;
  const int64_t vocab = engine.model_config().vocab_size;

  nlohmann::json record;
  record["machine"] = machine_json(engine);
  if (!o.commit.empty()) record["machine"]["git_commit"] = o.commit;
  record["options"] = options_json(o, engine);
  const auto& m = record["machine"];
  std::printf("quiver bench  %s  commit %s  %s  %s (%u cores)  load %.2f\n", m["date_utc"].get<std::string>().c_str(),
              m["git_commit"].get<std::string>().c_str(), args.device.c_str(),
              m.contains("gpu") ? m["gpu"].get<std::string>().c_str() : m["cpu"].get<std::string>().c_str(),
              m["nproc"].get<unsigned>(), m["loadavg_1_5_15"][0].get<double>());
  record["machine"]["ceiling_gb_per_s"] = bandwidth;
  record["machine"]["ceiling_how"] = ceiling.how;
  std::printf("ceiling %.1f GB/s (%s)\n", bandwidth, ceiling.how.c_str());
  const std::string ranks = args.tensor_parallel_size > 1
                                ? " over " + std::to_string(args.tensor_parallel_size) + " tensor-parallel ranks"
                                : "";
  std::printf("model %s (%s weights %.3f GB%s)  adapters %d (rank %d, %s, fraction %.2f)\n", args.model.c_str(),
              args.load_format.c_str(), static_cast<double>(engine.weight_bytes()) / 1e9, ranks.c_str(),
              o.num_adapters, o.lora_rank, o.lora_targets.c_str(), adapters.empty() ? 0.0 : o.lora_fraction);

  // Warm-up: as many requests with short fresh prompts for a few decode steps, so thread
  // start-up, first touches of the decode path and adapter loads into device slots stay
  // out of the numbers (best-of --num-iters absorbs the first long prefill's page faults).
  if (o.warmup_steps > 0) {
    BenchOptions w = o;
    w.output_len = o.warmup_steps + 1;
    auto reqs = make_requests(concurrent, std::min(o.input_len, 32), adapters, o.lora_fraction, vocab,
                              args.seed + 999, "warmup-");
    auto r = run_offline_pass(engine, w, cost, reqs, false);
    if (!r.is_ok()) return fail(r.message(), 1);
  }

  if (online) {
    auto reqs = make_requests(o.num_requests, o.input_len, adapters, o.lora_fraction, vocab, args.seed, "req-");
    Status a = assign_arrivals(&reqs, o.request_rate, args.seed);
    if (!a.is_ok()) return fail(a.message(), 2);
    std::printf("online: %d requests, rate %s/s, input %d, output %d\n", o.num_requests, o.request_rate.c_str(),
                o.input_len, o.output_len);
    auto r = run_online(engine, o, cost, reqs);
    if (!r.is_ok()) return fail(r.message(), 1);
    print_online(r.value());
    record["online"] = online_json(r.value());
    record["online"]["decode"] = pass_json(r->steps, cost, bandwidth)["decode"];
  } else {
    Status st = run_offline_iterations(engine, o, adapters, cost, bandwidth, &record);
    if (!st.is_ok()) return fail(st.message(), 1);
  }
  record["machine"]["loadavg_1_5_15_end"] = machine_json(engine)["loadavg_1_5_15"];
  // The probe again after the passes: on a shared host the rate moves (the 2-core machine
  // reads 27 or 44 GB/s from one minute to the next), and the two show by how much.
  if (ceiling.measured) record["machine"]["ceiling_end_gb_per_s"] = host_read_gbs(engine);

  if (!o.json_output.empty()) {
    std::ofstream out(o.json_output);
    out << record.dump(2) << "\n";
    out.close();
    if (!out) return fail("cannot write --json-output " + o.json_output, 2);
  }
  return 0;
}

}  // namespace

void register_bench(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "measure throughput, latency and achieved memory bandwidth");
  add_engine_flags(cmd, &o->engine);
  cmd->add_option("--batch-size", o->batch_size, "offline: requests submitted together");
  cmd->add_option("--input-len", o->input_len, "prompt tokens per request (random ids)");
  cmd->add_option("--output-len", o->output_len, "generated tokens per request (ignore_eos, greedy)");
  cmd->add_option("--num-adapters", o->num_adapters,
                  "synthesize this many random PEFT adapters (sets --max-loras to min(adapters, batch) "
                  "and --max-lora-rank to --lora-rank unless given)");
  cmd->add_option("--lora-rank", o->lora_rank, "rank of the synthesized adapters");
  cmd->add_option("--lora-targets", o->lora_targets, "all, or a comma list of q_proj,...,down_proj");
  // --lora-dtype is the engine's (resident stacks); this one is the synthesized files' dtype.
  cmd->add_option("--lora-file-dtype", o->lora_dtype, "dtype of the adapter files: bfloat16 | float16 | float32");
  cmd->add_option("--lora-vocab", o->lora_vocab,
                  "what the adapters do to the vocabulary: none | added=N (new tokens) | lm_head (a whole "
                  "replacement) | lora (LoRA on embed_tokens and lm_head)");
  cmd->add_option("--lora-fraction", o->lora_fraction, "share of requests with an adapter (0 = all base)");
  cmd->add_flag("--sequential-adapters", o->sequential_adapters,
                "offline: run one adapter's requests at a time, groups one after another");
  cmd->add_option("--compare", o->compare,
                  "offline: alternate each pass with the same shape on the base model (base), adapter by "
                  "adapter (sequential) or without --structured-outputs (structured) and report the ratios");
  cmd->add_option("--structured-outputs", o->structured_outputs,
                  "hold every request to this structured_outputs object, e.g. '{\"json\": {\"type\": \"object\"}}'");
  cmd->add_option("--num-requests", o->num_requests, "online mode: requests to send");
  cmd->add_option("--request-rate", o->request_rate, "online: Poisson arrivals per second, or inf (all at once)");
  cmd->add_option("--num-iters", o->num_iters, "offline: measured passes (each with fresh prompts)");
  cmd->add_option("--warmup-steps", o->warmup_steps, "decode steps of the unmeasured warm-up pass (0: none)");
  cmd->add_option("--mem-bandwidth-gbs", o->mem_bandwidth_gbs,
                  "memory bandwidth ceiling in GB/s (default: the host's read rate or the GPU's copy rate, measured at start)");
  cmd->add_option("--adapter-dir", o->adapter_dir, "write the synthesized adapters here and keep them");
  cmd->add_option("--commit", o->commit, "commit to record (for a tree copied without .git; default: git rev-parse)");
  cmd->add_option("--json-output", o->json_output, "write every number, date, commit and machine as JSON");
  cmd->callback([o, cmd, exit_code] { *exit_code = run_bench(*o, cmd); });
}

}  // namespace quiver
