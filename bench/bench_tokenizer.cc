// link: qv_tokenizer
// Tokenizer encode throughput on one core: the corpus lines (tests/fixtures/
// tokenizer_corpus.jsonl) repeated in order until >= 1 MiB, each encoded without special
// tokens. tools/make_tokenizer_fixtures.py times HF tokenizers on the same input, so both
// numbers come from the same CPU. Run from the repository root:
//   bench_tokenizer [TOKENIZER_DIR=tests/tokenizer_data/npm/llama3] [CORPUS=tests/fixtures/tokenizer_corpus.jsonl]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace {

constexpr size_t kBenchBytes = 1 << 20;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : "tests/tokenizer_data/npm/llama3";
  std::string corpus_path = argc > 2 ? argv[2] : "tests/fixtures/tokenizer_corpus.jsonl";
  auto load_start = std::chrono::steady_clock::now();
  auto loaded = quiver::Tokenizer::load(dir);
  if (!loaded.is_ok()) {
    std::fprintf(stderr, "bench_tokenizer: %s (run tools/fetch_tokenizers.sh?)\n", loaded.message().c_str());
    return 1;
  }
  double load_s = seconds_since(load_start);
  const quiver::Tokenizer& tok = *loaded.value();

  std::vector<std::string> texts;
  std::ifstream in(corpus_path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    std::string t = nlohmann::json::parse(line).at("text");
    if (!t.empty()) texts.push_back(t);
  }
  if (texts.empty()) {
    std::fprintf(stderr, "bench_tokenizer: no text in %s\n", corpus_path.c_str());
    return 1;
  }
  std::vector<const std::string*> lines;
  size_t total = 0;
  while (total < kBenchBytes) {
    for (const std::string& t : texts) {
      lines.push_back(&t);
      total += t.size();
      if (total >= kBenchBytes) break;
    }
  }

  size_t num_tokens = 0;
  auto pass = [&] {
    num_tokens = 0;
    auto start = std::chrono::steady_clock::now();
    for (const std::string* t : lines) num_tokens += tok.encode(*t, false).value().size();
    return seconds_since(start);
  };
  double cold = pass();  // first pass fills the word cache, as HF's first pass does
  double best = 1e30;
  for (int i = 0; i < 3; ++i) best = std::min(best, pass());
  std::printf("quiver tokenizer encode, %s, 1 thread: %zu lines, %.2f MB, %zu tokens\n", dir.c_str(), lines.size(),
              total / 1e6, num_tokens);
  std::printf("  load %.3f s; first pass %.3f s = %.2f MB/s; best of 3 warm %.3f s = %.2f MB/s (%.0f tokens/s)\n",
              load_s, cold, total / 1e6 / cold, best, total / 1e6 / best, num_tokens / best);
  return 0;
}
