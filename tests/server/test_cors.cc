// CORS answers: off by default; "*" without credentials answers "*"; a listed origin is
// echoed with Vary; credentials echo the origin; preflights check origin, method and
// requested headers and name what is disallowed; vLLM's JSON-list flags parse or refuse.
#include <gtest/gtest.h>

#include <algorithm>

#include "server/cors.h"

namespace quiver {
namespace {

std::string header(const HeaderList& h, const std::string& name) {
  for (const auto& [k, v] : h)
    if (k == name) return v;
  return "";
}

TEST(Cors, OffByDefault) {
  CorsOptions o;
  EXPECT_TRUE(cors_response_headers(o, "https://a.example").empty());
  const PreflightAnswer a = cors_preflight(o, "https://a.example", "POST", "content-type");
  EXPECT_EQ(a.status, 400);
  EXPECT_NE(a.body.find("origin"), std::string::npos);
}

TEST(Cors, AnyOriginAnswersStarUnlessCredentials) {
  CorsOptions o;
  o.allowed_origins = {"*"};
  EXPECT_EQ(header(cors_response_headers(o, "https://a.example"), "Access-Control-Allow-Origin"), "*");
  EXPECT_TRUE(cors_response_headers(o, "").empty()) << "not a cross-origin request";
  o.allow_credentials = true;
  const HeaderList h = cors_response_headers(o, "https://a.example");
  EXPECT_EQ(header(h, "Access-Control-Allow-Origin"), "https://a.example");
  EXPECT_EQ(header(h, "Vary"), "Origin");
  EXPECT_EQ(header(h, "Access-Control-Allow-Credentials"), "true");
}

TEST(Cors, ListedOriginsOnly) {
  CorsOptions o;
  o.allowed_origins = {"https://a.example"};
  EXPECT_EQ(header(cors_response_headers(o, "https://a.example"), "Access-Control-Allow-Origin"), "https://a.example");
  EXPECT_TRUE(cors_response_headers(o, "https://evil.example").empty());
}

TEST(Cors, Preflight) {
  CorsOptions o;
  o.allowed_origins = {"*"};
  PreflightAnswer a = cors_preflight(o, "https://a.example", "POST", "Authorization, Content-Type");
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, "OK");
  EXPECT_EQ(header(a.headers, "Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(header(a.headers, "Access-Control-Allow-Headers"), "Authorization, Content-Type");
  EXPECT_NE(header(a.headers, "Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_EQ(header(a.headers, "Access-Control-Max-Age"), "600");

  o.allowed_methods = {"GET", "POST"};
  o.allowed_headers = {"Authorization"};
  a = cors_preflight(o, "https://a.example", "POST", "authorization, content-type");  // simple headers always pass
  EXPECT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(header(a.headers, "Access-Control-Allow-Methods"), "GET, POST");
  a = cors_preflight(o, "https://a.example", "DELETE", "x-custom");
  EXPECT_EQ(a.status, 400);
  EXPECT_EQ(a.body, "Disallowed CORS method, headers");
}

TEST(Cors, JsonListFlags) {
  auto ok = parse_cors_list(R"(["https://a.example", "*"])", "--allowed-origins");
  ASSERT_TRUE(ok.is_ok());
  EXPECT_EQ(ok.value(), (std::vector<std::string>{"https://a.example", "*"}));
  for (const char* bad : {"https://a.example", R"({"a": 1})", "[1]", "["}) {
    auto r = parse_cors_list(bad, "--allowed-origins");
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_NE(r.status().message().find("--allowed-origins"), std::string::npos);
  }
}

}  // namespace
}  // namespace quiver
