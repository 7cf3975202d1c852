#include "http/params.hpp"

#include <string>

#include <gtest/gtest.h>

namespace onceq::http {
namespace {

TEST(ParamsTest, QueryStringBecomesObjectOfStrings) {
  auto q = parse_query("topic=orders&group=g1&max_messages=10");
  ASSERT_TRUE(q.ok()) << q.err().message;
  EXPECT_EQ((*q)["topic"], "orders");
  EXPECT_EQ((*q)["group"], "g1");
  EXPECT_EQ((*q)["max_messages"], "10");  // numbers stay text; the codec reads them
}

TEST(ParamsTest, PercentDecodingAndPlus) {
  auto q = parse_query("owner=a%20b%2Fc&key=x+y&empty=");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ((*q)["owner"], "a b/c");
  EXPECT_EQ((*q)["key"], "x y");
  EXPECT_EQ((*q)["empty"], "");
}

TEST(ParamsTest, BadEscapeIsRejected) {
  EXPECT_EQ(parse_query("a=%zz").code(), errc::invalid_argument);
  EXPECT_EQ(parse_query("a=%4").code(), errc::invalid_argument);
  EXPECT_EQ(parse_query("a=%").code(), errc::invalid_argument);
}

TEST(ParamsTest, RepeatedNameIsRejected) {
  EXPECT_EQ(parse_query("a=1&a=2").code(), errc::invalid_argument);
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
  EXPECT_EQ(p->obj["topic"], "a");
}

TEST(ParamsTest, EmptyOrBlankBodyUsesQuery) {
  for (std::string body : {"", "  \r\n\t"}) {
    auto p = read_params(body, "topic=b");
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(p->from_query);
    EXPECT_EQ(p->obj["topic"], "b");
  }
}

TEST(ParamsTest, MalformedJsonIsInvalidArgument) {
  EXPECT_EQ(read_params("{", "").code(), errc::invalid_argument);
  EXPECT_EQ(read_params("{\"a\":}", "").code(), errc::invalid_argument);
  EXPECT_EQ(read_params("[1,2]", "").code(), errc::invalid_argument);  // not an object
  EXPECT_EQ(read_params("\"str\"", "").code(), errc::invalid_argument);
  EXPECT_EQ(read_params("{\"a\":\"\xFF\"}", "").code(), errc::invalid_argument);  // bad UTF-8
}

TEST(ParamsTest, DeepNestingIsRejected) {
  std::string deep = R"({"result":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_EQ(read_params(deep, "").code(), errc::invalid_argument);
  std::string ok = R"({"result":)" + std::string(10, '[') + std::string(10, ']') + "}";
  EXPECT_TRUE(read_params(ok, "").ok());
  // Brackets inside strings do not count.
  std::string in_string = R"({"v":")" + std::string(1000, '[') + R"("})";
  EXPECT_TRUE(read_params(in_string, "").ok());
}

}  // namespace
}  // namespace onceq::http
