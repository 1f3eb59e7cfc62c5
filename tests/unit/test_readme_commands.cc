// link: qv_core
// The README's first lines are the two commands a new user runs, and they are the ones
// CI and the Makefile actually use: `.ci/run` runs `make test`, `make run` builds and runs
// the multi-LoRA demo on the shipped demo model.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(fs::path(QUIVER_SOURCE_DIR) / p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ReadmeCommands, FirstLinesAreMakeRunAndMakeTest) {
  const std::string readme = slurp("README.md");
  const std::string head = readme.substr(0, readme.find("quiver is"));
  EXPECT_NE(head.find("make run"), std::string::npos) << head;
  EXPECT_NE(head.find("make test"), std::string::npos) << head;
}

TEST(ReadmeCommands, CiRunsMakeTest) {
  const std::string ci = slurp(".ci/run");
  EXPECT_NE(ci.find("\nmake test\n"), std::string::npos) << ci;
}

TEST(ReadmeCommands, MakeRunInstallsBuildsAndRunsTheDemo) {
  const std::string mk = slurp("Makefile");
  // `make run` builds the demo's target only (not the tests or the server); `make test` all.
  EXPECT_NE(mk.find("run: deps"), std::string::npos);
  EXPECT_NE(mk.find("--target multilora_inference"), std::string::npos);
  EXPECT_NE(mk.find("-DBUILD_TESTING=OFF"), std::string::npos);
  EXPECT_NE(mk.find("test: build"), std::string::npos);
  EXPECT_NE(mk.find("build: deps"), std::string::npos);
  EXPECT_NE(mk.find("tools/install_deps.sh"), std::string::npos);
  EXPECT_NE(mk.find("multilora_inference --model models/demo/base --adapters models/demo/adapters"), std::string::npos);
  EXPECT_TRUE(fs::exists(fs::path(QUIVER_SOURCE_DIR) / "models/demo/base/model.safetensors"));
  EXPECT_TRUE(fs::exists(fs::path(QUIVER_SOURCE_DIR) / "models/demo/adapters/sql/adapter_model.safetensors"));
}

}  // namespace
