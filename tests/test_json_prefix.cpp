// JSON mode's recogniser: every prefix of a JSON object is taken, the first byte no object can
// continue with is refused (and leaves the state as it was), complete() exactly when the object
// closes.
#include "server/json_prefix.h"

#include <gtest/gtest.h>

#include <string>

using lamina::server::JsonPrefix;

namespace {

// The length of the longest prefix of s the recogniser takes, byte by byte.
size_t taken(const std::string& s, bool* complete = nullptr) {
  JsonPrefix j;
  size_t n = 0;
  while (n < s.size() && j.push(static_cast<unsigned char>(s[n]))) ++n;
  if (complete) *complete = j.complete();
  return n;
}

TEST(JsonPrefix, TakesWholeObjectsAndEndsWithThem) {
  for (const std::string s : {R"({})", R"( {"a": 1})", R"({"a":[1,-2.5e+3,0,true,false,null,"x"],"b":{"c":{}}})",
                              "{\"s\": \"\\\"q\\\\ \\u00e9 \\n \xc3\xa9\"}", R"({"n": [0.5, 1E9, -0, 12]})", "{\n\t\"k\" : [ ] \r}"}) {
    bool done = false;
    EXPECT_EQ(taken(s, &done), s.size()) << s;
    EXPECT_TRUE(done) << s;
  }
  bool done = true;
  const std::string part = R"({"a": [1, {"b": )";
  EXPECT_EQ(taken(part, &done), part.size());  // a prefix: taken, not complete
  EXPECT_FALSE(done);
}

TEST(JsonPrefix, RefusesTheFirstByteNoObjectContinuesWith) {
  // (string, how many of its bytes are taken)
  const std::pair<std::string, size_t> cases[] = {
      {"[1]", 0},              // the top level is an object
      {"\"a\"", 0},
      {R"({"a" 1})", 5},       // a colon must follow a key
      {R"({a: 1})", 1},        // keys are strings
      {R"({"a": 01})", 7},     // no leading zeros
      {R"({"a": 1.})", 8},     // a digit after the point
      {R"({"a": -})", 7},      // a digit after the minus
      {R"({"a": tru })", 9},   // literals whole
      {R"({"a": "\x"})", 8},   // escapes are JSON's
      {R"({"a": "\u12g4"})", 11},
      {"{\"a\": \"\x01\"}", 7},  // control characters escaped
      {R"({"a": 1,})", 8},     // no trailing comma: a key must come
      {R"({"a": 1]})", 7},     // brackets match
      {R"({} {})", 2},         // one object, then nothing
  };
  for (const auto& [s, n] : cases) EXPECT_EQ(taken(s), n) << s;
}

TEST(JsonPrefix, AStringIsTakenWhollyOrNotAtAll) {
  JsonPrefix j;
  ASSERT_TRUE(j.push(R"({"a": )"));
  EXPECT_FALSE(j.push("12}x"));  // the 'x' after the close: refused, and nothing of it taken
  EXPECT_TRUE(j.push("12}"));
  EXPECT_TRUE(j.complete());
}

}  // namespace
