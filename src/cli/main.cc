// quiver: the command line. Subcommands live in their own files (generate, bench, ...).
#include <CLI/CLI.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  CLI::App app{"quiver: multi-LoRA LLM inference"};
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
