// `quiver bench` reporting: percentiles, the facts a result needs to be judged later
// (UTC date, commit, CPU/GPU, load), the human table and the JSON record.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <thread>

#include "cli/bench.h"

namespace quiver::bench {

namespace {

// First line a shell command prints, trimmed; "" when it fails or prints nothing.
std::string first_line_of(const char* command) {
  FILE* p = popen(command, "r");
  if (!p) return "";
  char buf[256] = {0};
  std::string line = std::fgets(buf, sizeof(buf), p) ? buf : "";
  const int rc = pclose(p);
  if (rc != 0) return "";
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "unknown";
}

std::vector<double> load_average() {
  std::ifstream in("/proc/loadavg");
  double a = -1, b = -1, c = -1;
  in >> a >> b >> c;
  return {a, b, c};
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The command line as run (Linux), so a JSON record can be reproduced.
std::string command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string out;
  for (char c : raw) out += c == '\0' ? ' ' : c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

double rate(double count, double sec) { return sec > 0 ? count / sec : 0.0; }

nlohmann::json distribution(const std::vector<double>& v) {
  double mean = 0;
  for (double x : v) mean += x;
  mean = v.empty() ? 0 : mean / static_cast<double>(v.size());
  // min and p10 estimate the undisturbed cost when other processes share the cores.
  return {{"count", v.size()},
          {"mean", mean},
          {"min", v.empty() ? 0.0 : *std::min_element(v.begin(), v.end())},
          {"p10", percentile(v, 10)},
          {"p50", percentile(v, 50)},
          {"p90", percentile(v, 90)},
          {"p99", percentile(v, 99)},
          {"max", v.empty() ? 0.0 : *std::max_element(v.begin(), v.end())}};
}

}  // namespace

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

nlohmann::json machine_json(const LLMEngine& engine) {
  nlohmann::json m;
  m["date_utc"] = utc_now();
  const std::string commit = first_line_of("git rev-parse --short HEAD 2>/dev/null");
  m["git_commit"] = commit.empty() ? "unknown" : commit;
  // Uncommitted changes to tracked files (other work in a shared tree counts too).
  if (!commit.empty()) m["git_dirty"] = !first_line_of("git status --porcelain --untracked-files=no 2>/dev/null").empty();
  m["cpu"] = cpu_model();
  m["nproc"] = std::thread::hardware_concurrency();
  m["loadavg_1_5_15"] = load_average();
  m["device"] = engine.args().device;
  m["backend"] = engine.backend()->name();
  m["threads"] = engine.args().threads;
  if (engine.backend()->device() == Device::kCuda) {
    const std::string gpu = first_line_of("nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null");
    m["gpu"] = gpu.empty() ? "unknown" : gpu;
  }
  m["command_line"] = command_line();
  return m;
}

nlohmann::json pass_json(const PassStats& s, const CostModel& b, double bandwidth_gbs) {
  nlohmann::json j;
  j["prefill"] = {{"steps", s.prefill_steps},
                  {"tokens", s.prefill_tokens},
                  {"seconds", s.prefill_s},
                  {"tokens_per_s", rate(static_cast<double>(s.prefill_tokens), s.prefill_s)},
                  {"linear_gflop_per_s", rate(s.prefill_linear_flops, s.prefill_s) / 1e9}};
  const double bytes_per_step = s.decode_steps ? s.decode_bytes / s.decode_steps : 0.0;
  const double achieved_gbs = rate(s.decode_bytes, s.decode_s) / 1e9;
  const double floor_ms = bytes_per_step / (bandwidth_gbs * 1e9) * 1e3;
  j["decode"] = {{"steps", s.decode_steps},
                 {"tokens", s.decode_tokens},
                 {"seconds", s.decode_s},
                 {"tokens_per_s", rate(static_cast<double>(s.decode_tokens), s.decode_s)},
                 {"step_ms", distribution(s.decode_step_ms)},
                 {"bytes_per_step", bytes_per_step},
                 {"weight_bytes_per_step", b.weight_bytes},
                 {"adapter_bytes_per_step", s.decode_steps ? s.decode_adapter_bytes / s.decode_steps : 0.0},
                 {"kv_bytes_per_step", s.decode_steps ? s.decode_kv_bytes / s.decode_steps : 0.0},
                 {"achieved_gb_per_s", achieved_gbs},
                 {"ceiling_gb_per_s", bandwidth_gbs},
                 {"floor_ms_per_step", floor_ms},
                 {"fraction_of_ceiling", achieved_gbs / bandwidth_gbs},
                 {"gflop_per_step", s.decode_steps ? s.decode_flops / s.decode_steps / 1e9 : 0.0},
                 {"gflop_per_s", rate(s.decode_flops, s.decode_s) / 1e9},
                 {"paths", s.decode_paths}};
  j["mixed"] = {{"steps", s.mixed_steps}, {"tokens", s.mixed_tokens}, {"seconds", s.mixed_s}};
  j["end_to_end"] = {{"output_tokens", s.output_tokens},
                     {"seconds", s.total_s},
                     {"output_tokens_per_s", rate(static_cast<double>(s.output_tokens), s.total_s)},
                     {"preemptions", s.num_preempted}};
  return j;
}

void print_pass(const std::string& label, const PassStats& s, const CostModel& b, double bandwidth_gbs) {
  const nlohmann::json j = pass_json(s, b, bandwidth_gbs);
  const auto& d = j["decode"];
  std::printf("%s\n", label.c_str());
  std::printf("  prefill    %3d steps %7lld tokens %9.3f s %10.1f tok/s   linear layers %.1f GFLOP/s\n",
              s.prefill_steps, static_cast<long long>(s.prefill_tokens), s.prefill_s,
              j["prefill"]["tokens_per_s"].get<double>(), j["prefill"]["linear_gflop_per_s"].get<double>());
  std::printf("  decode     %3d steps %7lld tokens %9.3f s %10.2f tok/s   step min %.2f  p50 %.2f  p90 %.2f ms\n",
              s.decode_steps, static_cast<long long>(s.decode_tokens), s.decode_s, d["tokens_per_s"].get<double>(),
              d["step_ms"]["min"].get<double>(), d["step_ms"]["p50"].get<double>(), d["step_ms"]["p90"].get<double>());
  if (s.mixed_steps > 0)
    std::printf("  mixed      %3d steps %7lld tokens %9.3f s\n", s.mixed_steps, static_cast<long long>(s.mixed_tokens),
                s.mixed_s);
  std::printf("  end-to-end %7lld output tokens %9.3f s %10.2f tok/s%s\n", static_cast<long long>(s.output_tokens),
              s.total_s, j["end_to_end"]["output_tokens_per_s"].get<double>(),
              s.num_preempted ? (" (" + std::to_string(s.num_preempted) + " preemptions)").c_str() : "");
  if (s.decode_steps == 0) return;
  std::printf("  bytes/decode step %.3f GB = weights %.3f + adapters %.3f + KV %.3f\n",
              d["bytes_per_step"].get<double>() / 1e9, b.weight_bytes / 1e9,
              d["adapter_bytes_per_step"].get<double>() / 1e9, d["kv_bytes_per_step"].get<double>() / 1e9);
  std::printf("  bandwidth  %.1f GB/s achieved; ceiling %.0f GB/s -> floor %.2f ms/step; %.0f%% of ceiling\n",
              d["achieved_gb_per_s"].get<double>(), bandwidth_gbs, d["floor_ms_per_step"].get<double>(),
              100.0 * d["fraction_of_ceiling"].get<double>());
  std::string paths;
  for (const auto& [path, count] : s.decode_paths) paths += " " + path + " x" + std::to_string(count);
  std::printf("  compute    %.2f GFLOP/decode step, %.1f GFLOP/s   decode paths:%s\n", d["gflop_per_step"].get<double>(),
              d["gflop_per_s"].get<double>(), paths.c_str());
}

nlohmann::json online_json(const OnlineStats& s) {
  nlohmann::json j;
  j["num_requests"] = s.num_requests;
  j["duration_s"] = s.duration_s;
  j["output_tokens"] = s.steps.output_tokens;
  j["output_tokens_per_s"] = rate(static_cast<double>(s.steps.output_tokens), s.duration_s);
  j["requests_per_s"] = rate(static_cast<double>(s.num_requests), s.duration_s);
  j["ttft_ms"] = distribution(s.ttft_ms);
  j["itl_ms"] = distribution(s.itl_ms);
  j["e2e_ms"] = distribution(s.e2e_ms);
  j["steps"] = {{"prefill", s.steps.prefill_steps},
                {"decode", s.steps.decode_steps},
                {"mixed", s.steps.mixed_steps},
                {"preemptions", s.steps.num_preempted}};
  return j;
}

void print_online(const OnlineStats& s) {
  const nlohmann::json j = online_json(s);
  std::printf("  %d requests in %.2f s: %.2f req/s, %.2f output tok/s  (steps: %d prefill, %d decode, %d mixed)\n",
              s.num_requests, s.duration_s, j["requests_per_s"].get<double>(), j["output_tokens_per_s"].get<double>(),
              s.steps.prefill_steps, s.steps.decode_steps, s.steps.mixed_steps);
  std::printf("  %-6s %10s %10s %10s %10s\n", "ms", "mean", "p50", "p90", "p99");
  const std::pair<const char*, const char*> rows[] = {{"TTFT", "ttft_ms"}, {"ITL", "itl_ms"}, {"E2E", "e2e_ms"}};
  for (const auto& [label, key] : rows) {
    const auto& d = j[key];
    std::printf("  %-6s %10.1f %10.1f %10.1f %10.1f\n", label, d["mean"].get<double>(), d["p50"].get<double>(),
                d["p90"].get<double>(), d["p99"].get<double>());
  }
}

}  // namespace quiver::bench
