#include "http/params.hpp"

#include <string>

#include <gtest/gtest.h>

namespace onceq::http {
namespace {

// The string value of field name of doc's root ("<absent>", "<not a string>").
std::string field(const jdoc& doc, std::string_view name) {
  const jvalue* v = doc.root().find(name);
  if (v == nullptr) return "<absent>";
  if (!v->is_string()) return "<not a string>";
  return std::string(v->str());
}

TEST(ParamsTest, QueryStringBecomesObjectOfStrings) {
  auto q = parse_query("topic=orders&group=g1&max_messages=10");
  ASSERT_TRUE(q.ok()) << q.err().message;
  ASSERT_TRUE(q->root().is_object());
  EXPECT_EQ(q->root().size(), 3u);
  EXPECT_EQ(field(*q, "topic"), "orders");
  EXPECT_EQ(field(*q, "group"), "g1");
  EXPECT_EQ(field(*q, "max_messages"), "10");  // numbers stay text; the codec reads them
}

TEST(ParamsTest, PercentDecodingAndPlus) {
  auto q = parse_query("owner=a%20b%2Fc&key=x+y&empty=");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(field(*q, "owner"), "a b/c");
  EXPECT_EQ(field(*q, "key"), "x y");
  EXPECT_EQ(field(*q, "empty"), "");
}

TEST(ParamsTest, QueryValuesNeedingJsonEscapesSurvive) {
  auto q = parse_query("k=%22%5C%0A%01%C3%A9&%22n%22=v");
  ASSERT_TRUE(q.ok()) << q.err().message;
  EXPECT_EQ(field(*q, "k"), "\"\\\n\x01\xC3\xA9");
  EXPECT_EQ(field(*q, "\"n\""), "v");
  // A parameter as a JSON value (e.g. an ack's result) is a JSON string.
  EXPECT_EQ(minified(*q->root().find("k")), "\"\\\"\\\\\\n\\u0001\xC3\xA9\"");
}

TEST(ParamsTest, BadEscapeIsRejected) {
  EXPECT_EQ(parse_query("a=%zz").code(), errc::invalid_argument);
  EXPECT_EQ(parse_query("a=%4").code(), errc::invalid_argument);
  EXPECT_EQ(parse_query("a=%").code(), errc::invalid_argument);
}

TEST(ParamsTest, RepeatedNameIsRejected) {
  auto q = parse_query("a=1&b=2&a=2");
  ASSERT_EQ(q.code(), errc::invalid_argument);
  EXPECT_EQ(q.err().message, "query parameter 'a' is given more than once");
  EXPECT_EQ(parse_query("a%20b=1&a+b=2").code(), errc::invalid_argument);  // same once decoded
}

TEST(ParamsTest, InvalidUtf8IsRejected) {
  EXPECT_EQ(parse_query("a=%FF").code(), errc::invalid_argument);
  EXPECT_TRUE(parse_query("a=%C3%A9").ok());  // é
}

TEST(ParamsTest, Utf8Validation) {
  EXPECT_TRUE(valid_utf8("plain"));
  EXPECT_TRUE(valid_utf8("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"));
  EXPECT_FALSE(valid_utf8("\xC0\xAF"));          // overlong
  EXPECT_FALSE(valid_utf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(valid_utf8("\xE2\x82"));          // truncated
  EXPECT_FALSE(valid_utf8("\xF4\x90\x80\x80"));  // > U+10FFFF
}

TEST(ParamsTest, BodyWinsOverQuery) {
  auto p = read_params(R"({"topic":"a"})", "topic=b");
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->from_query);
  EXPECT_EQ(field(p->doc, "topic"), "a");
}

TEST(ParamsTest, EmptyOrBlankBodyUsesQuery) {
  for (std::string body : {"", "  \r\n\t"}) {
    auto p = read_params(body, "topic=b");
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(p->from_query);
    EXPECT_EQ(field(p->doc, "topic"), "b");
  }
}

TEST(ParamsTest, MalformedJsonIsInvalidArgument) {
  for (std::string body :
       {"{", "{\"a\":}", "{\"a\":\"\xFF\"}" /* bad UTF-8 */, "{} x", "{\"a\":01}"}) {
    auto p = read_params(body, "");
    ASSERT_EQ(p.code(), errc::invalid_argument) << body;
    EXPECT_EQ(p.err().message, "malformed JSON body") << body;
  }
  for (std::string body : {"[1,2]", "\"str\"", "5", "null"}) {
    auto p = read_params(body, "");
    ASSERT_EQ(p.code(), errc::invalid_argument) << body;
    EXPECT_EQ(p.err().message, "the JSON body must be an object") << body;
  }
}

TEST(ParamsTest, BodyKeepsItsOwnText) {
  // Leading whitespace and a UTF-8 BOM are fine (as with nlohmann::json).
  auto p = read_params(" \n{\"topic\": \"a\"}\t", "");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(field(p->doc, "topic"), "a");
  EXPECT_TRUE(read_params("\xEF\xBB\xBF{}", "").ok());
}

TEST(ParamsTest, DuplicateKeysAreRejectedByName) {
  auto p = read_params(R"({"topic":"a","value":"v","topic":"b"})", "");
  ASSERT_EQ(p.code(), errc::invalid_argument);
  EXPECT_EQ(p.err().message, "duplicate field 'topic' in the JSON body");
  p = read_params(R"({"messages":[{"value":"a"},{"envelope":{"msg_id":"x","msg_id":"y"}}]})", "");
  ASSERT_EQ(p.code(), errc::invalid_argument);
  EXPECT_EQ(p.err().message, "duplicate field 'messages[1].envelope.msg_id' in the JSON body");
  // Keys are compared decoded.
  EXPECT_EQ(read_params(R"({"a":1,"\u0061":2})", "").code(), errc::invalid_argument);
}

TEST(ParamsTest, DeepNestingIsRejected) {
  std::string deep = R"({"result":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  auto p = read_params(deep, "");
  ASSERT_EQ(p.code(), errc::invalid_argument);
  EXPECT_EQ(p.err().message, "JSON body nested deeper than 64 levels");
  // 64 levels in all are fine, 65 are not.
  auto nested = [](int levels) {
    return std::string(static_cast<std::size_t>(levels - 1), '[') + "{}" +
           std::string(static_cast<std::size_t>(levels - 1), ']');
  };
  EXPECT_TRUE(read_params(R"({"r":)" + nested(63) + "}", "").ok());
  EXPECT_EQ(read_params(R"({"r":)" + nested(64) + "}", "").code(), errc::invalid_argument);
  std::string ok = R"({"result":)" + std::string(10, '[') + std::string(10, ']') + "}";
  EXPECT_TRUE(read_params(ok, "").ok());
  // Brackets inside strings do not count.
  std::string in_string = R"({"v":")" + std::string(1000, '[') + R"("})";
  EXPECT_TRUE(read_params(in_string, "").ok());
}

}  // namespace
}  // namespace onceq::http
