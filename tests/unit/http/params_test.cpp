#include "http/params.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace onceq::http {
namespace {

// The fields of the top level of p, read as strings: "name=value;..." or
// the error ("! message"). Names outside the list are unknown.
std::string read_strings(const params& p) {
  try {
    reader r(p);
    std::string out;
    r.each({"topic", "group", "max_messages", "owner", "key", "empty", "k", "\"n\"", "a", "b", "v"},
           [&](std::size_t, field& f) {
             out += std::string(f.name()) + "=" + std::string(f.str()) + ";";
           });
    return out;
  } catch (const bad_input& e) {
    return "! " + e.message;
  }
}

std::string read_body(std::string_view body) {
  auto p = read_params(body, "");
  if (!p.ok()) return "! " + p.err().message;
  return read_strings(*p);
}

std::string read_query(std::string_view query) {
  auto p = read_params("", query);
  if (!p.ok()) return "! " + p.err().message;
  EXPECT_TRUE(p->from_query());
  return read_strings(*p);
}

TEST(ParamsTest, QueryStringIsReadAsStrings) {
  EXPECT_EQ(read_query("topic=orders&group=g1&max_messages=10"),
            "topic=orders;group=g1;max_messages=10;");
}

TEST(ParamsTest, PercentDecodingAndPlus) {
  EXPECT_EQ(read_query("owner=a%20b%2Fc&key=x+y&empty="), "owner=a b/c;key=x y;empty=;");
}

TEST(ParamsTest, QueryValuesNeedingJsonEscapesSurvive) {
  EXPECT_EQ(read_query("k=%22%5C%0A%01%C3%A9&%22n%22=v"), "k=\"\\\n\x01\xC3\xA9;\"n\"=v;");
  // A parameter as a JSON value (an ack's result) is a JSON string.
  auto p = read_params("", "k=%22%5C%0A%01%C3%A9");
  ASSERT_TRUE(p.ok());
  reader r(*p);
  std::string j;
  r.each({"k"}, [&](std::size_t, field& f) { j = f.json(); });
  EXPECT_EQ(j, "\"\\\"\\\\\\n\\u0001\xC3\xA9\"");
}

TEST(ParamsTest, QueryNumbersBooleansAndLists) {
  auto p = read_params("", "a=-12&b=true&v=x,y,,z");
  ASSERT_TRUE(p.ok());
  reader r(*p);
  std::int64_t a = 0;
  bool b = false;
  std::vector<std::string> v;
  r.each({"a", "b", "v"}, [&](std::size_t i, field& f) {
    if (i == 0) a = f.integer(-100, 100);
    if (i == 1) b = f.boolean();
    if (i == 2) v = f.strings(8);
  });
  EXPECT_EQ(a, -12);
  EXPECT_TRUE(b);
  EXPECT_EQ(v, (std::vector<std::string>{"x", "y", "", "z"}));
  auto bad = read_params("", "a=1.5");
  ASSERT_TRUE(bad.ok());
  reader r2(*bad);
  try {
    r2.each({"a"}, [&](std::size_t, field& f) { (void)f.integer(0, 10); });
    ADD_FAILURE() << "accepted";
  } catch (const bad_input& e) {
    EXPECT_EQ(e.message, "a must be a decimal integer");
  }
}

TEST(ParamsTest, BadEscapeIsRejected) {
  EXPECT_EQ(read_params("", "a=%zz").code(), errc::invalid_argument);
  EXPECT_EQ(read_params("", "a=%4").code(), errc::invalid_argument);
  EXPECT_EQ(read_params("", "a=%").code(), errc::invalid_argument);
}

TEST(ParamsTest, RepeatedNameIsRejected) {
  auto q = read_params("", "a=1&b=2&a=2");
  ASSERT_EQ(q.code(), errc::invalid_argument);
  EXPECT_EQ(q.err().message, "query parameter 'a' is given more than once");
  EXPECT_EQ(read_params("", "a%20b=1&a+b=2").code(), errc::invalid_argument);  // same decoded
}

TEST(ParamsTest, InvalidUtf8IsRejected) {
  EXPECT_EQ(read_params("", "a=%FF").code(), errc::invalid_argument);
  EXPECT_TRUE(read_params("", "a=%C3%A9").ok());  // é
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
  EXPECT_FALSE(p->from_query());
  EXPECT_EQ(read_strings(*p), "topic=a;");
}

TEST(ParamsTest, EmptyOrBlankBodyUsesQuery) {
  for (std::string body : {"", "  \r\n\t"}) {
    auto p = read_params(body, "topic=b");
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(p->from_query());
    EXPECT_EQ(read_strings(*p), "topic=b;");
  }
}

TEST(ParamsTest, MalformedJsonIsInvalidArgument) {
  for (std::string body : {"{", "{\"a\":}", "{\"a\":\"\xFF\"}" /* bad UTF-8 */, "{} x",
                           "{\"a\":01}", "{\"topic\":\"a\",}", "{\"topic\":\"a\"",
                           "{\"topic\":\"a\"}}", "[1,", "nul", "{\"a\":\"b\" \"c\":1}"}) {
    EXPECT_EQ(read_body(body), "! malformed JSON body") << body;
  }
  for (std::string body : {"[1,2]", "\"str\"", "5", "null", " [ ] "}) {
    EXPECT_EQ(read_body(body), "! the JSON body must be an object") << body;
  }
}

TEST(ParamsTest, BodyKeepsItsOwnText) {
  // Leading whitespace and a UTF-8 BOM are fine (as with nlohmann::json).
  EXPECT_EQ(read_body(" \n{\"topic\": \"a\"}\t"), "topic=a;");
  EXPECT_EQ(read_body("\xEF\xBB\xBF{}"), "");
  // Keys with escapes are decoded before they are matched.
  EXPECT_EQ(read_body(R"({"\u0074opic":"a"})"), "topic=a;");
  EXPECT_EQ(read_body(R"({"zz":"a"})"), "! unknown field 'zz'");
}

TEST(ParamsTest, PaddedBodiesAreReadInPlaceOthersCopied) {
  std::string body = R"({"topic":"in place"})";
  body.reserve(body.size() + k_json_padding);
  auto p = read_params(body, "", body.capacity());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(read_strings(*p), "topic=in place;");
  // Without the room: a copy, which the params own (the text may go).
  std::string tight = R"({"topic":"copied"})";
  tight.shrink_to_fit();
  auto q = read_params(tight, "", tight.size());
  ASSERT_TRUE(q.ok());
  tight.assign(tight.size(), 'x');
  EXPECT_EQ(read_strings(*q), "topic=copied;");
  // A string value ending right at the body's end, where padding begins.
  const std::string end = "{\"v\":\"" + std::string(100, 'e') + "\"}";
  EXPECT_EQ(read_body(end), "v=" + std::string(100, 'e') + ";");
}

TEST(ParamsTest, DuplicateKeysAreRejectedByName) {
  EXPECT_EQ(read_body(R"({"topic":"a","v":"v","topic":"b"})"),
            "! duplicate field 'topic' in the JSON body");
  // Keys are compared decoded.
  EXPECT_EQ(read_body(R"({"a":"1","\u0061":"2"})"), "! duplicate field 'a' in the JSON body");
}

TEST(ParamsTest, NestedReadersNamePathsAndLimitDepth) {
  auto p = read_params(
      R"({"m":[{"e":{"x":"1"}},{"e":{"x":"2","x":"3"}}],"r":{"a":[{"k":1,"k":2}]}})", "");
  ASSERT_TRUE(p.ok());
  auto first_error = [&](const params& in) -> std::string {
    try {
      reader r(in);
      r.each({"m", "r"}, [&](std::size_t i, field& f) {
        if (i == 1) {
          (void)f.json();
          return;
        }
        f.objects(10, [&](std::size_t, reader& m) {
          m.each({"e"}, [&](std::size_t, field& e) {
            reader er = e.object();
            er.each({"x"}, [&](std::size_t, field& x) { (void)x.str(); });
          });
        });
      });
      return "";
    } catch (const bad_input& e) {
      return e.message;
    }
  };
  EXPECT_EQ(first_error(*p), "duplicate field 'm[1].e.x' in the JSON body");
  p = read_params(R"({"r":{"a":[{"k":1,"k":2}]}})", "");
  EXPECT_EQ(first_error(*p), "duplicate field 'r.a[0].k' in the JSON body");
  // 64 levels in all are fine, 65 are not.
  auto nested = [](int levels) {
    return std::string(static_cast<std::size_t>(levels - 1), '[') + "{}" +
           std::string(static_cast<std::size_t>(levels - 1), ']');
  };
  EXPECT_EQ(first_error(*read_params(R"({"r":)" + nested(63) + "}", "")), "");
  EXPECT_EQ(first_error(*read_params(R"({"r":)" + nested(64) + "}", "")),
            "JSON body nested deeper than 64 levels");
  std::string deep = R"({"r":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_EQ(first_error(*read_params(deep, "")), "JSON body nested deeper than 64 levels");
  // Brackets inside strings do not count.
  EXPECT_EQ(first_error(*read_params(R"({"r":")" + std::string(1000, '[') + R"("})", "")), "");
}

}  // namespace
}  // namespace onceq::http
