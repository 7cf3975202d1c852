// Reading JSON is simdjson's (http/params.hpp); these check what the
// server accepts and echoes, through its two entry points: json_field
// (a whole document: the broker's message inspector) and an ack's free-form
// result read by the codec (a value inside a body, stored minified). And
// the one writer path (http/json_write.hpp).
#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http/codec.hpp"
#include "http/json_write.hpp"
#include "http/params.hpp"

namespace onceq::http {
namespace {

using json = nlohmann::json;

// Whether text is a whole JSON document to the server.
bool accepts(std::string_view text) {
  auto r = json_field(text, "no.such.field");
  return r.ok() || r.code() != errc::invalid_argument;
}

// text as an ack's result: the stored (minified) result, or "! message".
std::string as_result(std::string_view text) {
  const std::string body =
      R"({"topic":"t","group":"g","owner":"o","partition":0,"offset":0,"result":)" +
      std::string(text) + "}";
  auto a = parse_ack(params::json(body));
  if (!a.ok()) return "! " + a.err().message;
  return std::get<ack_cmd>(*a).result_json;
}

// ---- what is accepted ----------------------------------------------------------

TEST(JsonTest, ValidTextsMatchNlohmann) {
  const std::vector<std::string> valid = {
      "{}",
      "[]",
      "0",
      "-0",
      "1",
      "-1",
      "0.5",
      "-0.0e-0",
      "1e5",
      "1E+5",
      "1e-5",
      "123456789012345678901234567890",
      "1e-400",  // underflows to 0: nlohmann accepts it
      "1.7976931348623157e308",
      "true",
      "false",
      "null",
      R"("")",
      R"("plain")",
      R"(" \/ \" \\ \b \f \n \r \t ")",
      R"("\u0000")",
      R"("\u00e9\u00E9")",
      R"("\ud83d\ude00")",
      R"("\uDBFF\uDFFF")",
      "\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF\x7F\"",
      " \t\r\n{ \"a\" : [ 1 , 2 , { } , [ ] ] , \"b\" : { \"c\" : null } } \n",
      R"({"a":{"a":{"a":1}}})",  // the same key at different levels
      R"([[[[[]]]]])",
      "\xEF\xBB\xBF{\"bom\":true}",
      R"({"":0," ":1})",
      R"([1,"a",true,false,null,{"k":[-1.5e-3]}])",
  };
  for (const std::string& text : valid) {
    SCOPED_TRACE(::testing::PrintToString(text));
    ASSERT_TRUE(json::accept(text));  // the corpus itself is right
    EXPECT_TRUE(accepts(text));
    if (text.starts_with("\xEF\xBB\xBF")) continue;  // a BOM only starts a document
    if (text == "null") continue;                    // never a valid field value
    const std::string stored = as_result(text);
    ASSERT_FALSE(stored.starts_with("!")) << stored;
    EXPECT_EQ(json::parse(stored), json::parse(text));
  }
}

TEST(JsonTest, InvalidTextsAreRejectedAsByNlohmann) {
  const std::vector<std::string> invalid = {
      "",
      " ",
      "\xEF\xBB\xBF",
      "\xEF\xBB{}",  // half a BOM
      " \xEF\xBB\xBF{}",
      "{",
      "}",
      "[",
      "[1,]",
      "[,1]",
      "[1 2]",
      "{,}",
      R"({"a":1,})",
      R"({"a" 1})",
      R"({"a":})",
      R"({a:1})",
      R"({'a':1})",
      R"({"a":1}})",
      R"({"a":1} x)",
      "{} {}",
      "[] []",
      "1 2",
      "01",
      "-01",
      "00",
      "-",
      "--1",
      "+1",
      "1.",
      ".5",
      "1.e5",
      "1e",
      "1e+",
      "1e-",
      "0x10",
      "1_000",
      "NaN",
      "-NaN",
      "Infinity",
      "-Infinity",
      "1e400",
      "-1e400",
      "1" + std::string(400, '0'),  // an integer past a double
      "tru",
      "truex",
      "nul",
      "nulll",
      "True",
      "undefined",
      R"(")",
      R"("abc)",
      R"("\")",
      R"("\x")",
      R"("\a")",
      R"("\u")",
      R"("\u12")",
      R"("\u12G4")",
      R"("\U0041")",
      R"("\ud800")",        // lone high surrogate
      R"("\udc00")",        // lone low surrogate
      R"("\ud800\u0041")",  // high + not low
      R"("\ud800\ud800")",  // high + high
      R"("\ud800x")",       // high + text
      R"("\ud800\")",       // high + bare backslash
      R"("\udbff\udc0")",   // short low
      "\"\x01\"",           // control characters
      "\"\x1F\"",
      "\"\t\"",
      "\"\n\"",
      std::string("\"\0\"", 3),
      std::string("[\0]", 3),
      "\"\x80\"",              // lone continuation byte
      "\"\xC0\xAF\"",          // overlong '/'
      "\"\xC1\xBF\"",          // overlong
      "\"\xE0\x80\xAF\"",      // overlong
      "\"\xE0\x9F\xBF\"",      // overlong
      "\"\xF0\x80\x80\xAF\"",  // overlong
      "\"\xF0\x8F\xBF\xBF\"",  // overlong
      "\"\xED\xA0\x80\"",      // UTF-16 surrogate in UTF-8
      "\"\xED\xBF\xBF\"",
      "\"\xF4\x90\x80\x80\"",  // past U+10FFFF
      "\"\xF5\x80\x80\x80\"",
      "\"\xFF\"",
      "\"\xFE\"",
      "\"\xC3\"",  // truncated before the quote
      "\"\xE2\x82\"",
      "\"\xF0\x9F\x98\"",
      "\"\xC3",  // truncated at the end of the text
      "\"\xF0\x9F",
      "\"\xC3\xC3\xA9\"",  // lead where a continuation belongs
      "[\"a\"\xC3\xA9]",   // UTF-8 outside a string
      "/* c */ {}",
      "{} // c",
      "[1,2,3",
      "{\"a\":[1,{\"b\":2]}",
  };
  for (const std::string& text : invalid) {
    SCOPED_TRACE(::testing::PrintToString(text));
    ASSERT_FALSE(json::accept(text));  // the corpus itself is right
    EXPECT_FALSE(accepts(text));
    EXPECT_EQ(as_result(text), "! malformed JSON body");
  }
}

TEST(JsonTest, NulAfterTheValueIsTrailingText) {
  // nlohmann takes a NUL byte outside strings for the end of the input and
  // ignores what follows; the server does not.
  const std::string text("{}\0garbage", 10);
  EXPECT_TRUE(json::accept(text));
  EXPECT_FALSE(accepts(text));
}

TEST(JsonTest, FieldsByPath) {
  const std::string doc =
      R"({"a":{"b":[1],"n":null,"s":"x\ty","t":true,"num":-1.50e3},"\u0063":7})";
  EXPECT_EQ(json_field(doc, "a.s").value(), "x\ty");
  EXPECT_EQ(json_field(doc, "a.num").value(), "-1.50e3");  // numbers as written
  EXPECT_EQ(json_field(doc, "a.t").value(), "true");
  EXPECT_EQ(json_field(doc, "c").value(), "7");  // keys compared decoded
  EXPECT_EQ(json_field(doc, "a.n").code(), errc::not_found);
  EXPECT_EQ(json_field(doc, "a.zz").code(), errc::not_found);
  EXPECT_EQ(json_field(doc, "a.s.x").code(), errc::not_found);
  EXPECT_EQ(json_field(doc, "a.b").code(), errc::invalid_argument);  // an array
  EXPECT_EQ(json_field("[1]", "a").code(), errc::not_found);
  EXPECT_EQ(json_field(R"({"a":1,"a":2})", "a").code(), errc::invalid_argument);
  EXPECT_EQ(json_field(R"({"a":1,"b":[})", "a").code(), errc::invalid_argument);
}

TEST(JsonTest, NumbersAndStringsKeepTheirText) {
  EXPECT_EQ(as_result(R"([0,-12,1.50,2e3,-0,18446744073709551616])"),
            R"([0,-12,1.50,2e3,-0,18446744073709551616])");
  // Escapes stay as written; whitespace outside strings goes.
  EXPECT_EQ(as_result(R"( [ "\u00e9\/" , "\\ \"" , { "b" : "c \" d\n" } ] )"),
            R"(["\u00e9\/","\\ \"",{"b":"c \" d\n"}])");
  EXPECT_EQ(as_result("\"a\\u0000b\""), "\"a\\u0000b\"");
  EXPECT_EQ(as_result(" -1.5e3 "), "-1.5e3");
  EXPECT_EQ(as_result("null"), "! result must not be null");
}

TEST(JsonTest, SpecialBytesAtEveryPosition) {
  const std::vector<std::pair<std::string, std::string>> specials = {
      {"\\n", "\n"},
      {"\\\"", "\""},
      {"\xC3\xA9", "\xC3\xA9"},
      {"\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80"}};
  for (std::size_t pos = 0; pos < 70; ++pos) {
    for (const auto& [written, decoded] : specials) {
      const std::string text =
          "{\"a\":\"" + std::string(pos, 'x') + written + std::string(70 - pos, 'y') + "\"}";
      ASSERT_EQ(json_field(text, "a").value(),
                std::string(pos, 'x') + decoded + std::string(70 - pos, 'y'))
          << pos;
    }
    EXPECT_FALSE(accepts("\"" + std::string(pos, 'x') + "\x01" + std::string(70 - pos, 'y') + "\""))
        << pos;
    EXPECT_FALSE(
        accepts("\"" + std::string(pos, 'x') + "\xC0\x80" + std::string(70 - pos, 'y') + "\""))
        << pos;
    EXPECT_FALSE(accepts("\"" + std::string(pos, 'x'))) << pos;  // unterminated
  }
}

// ---- structure -----------------------------------------------------------------------

TEST(JsonTest, NestingLimit) {
  auto nested = [](int levels) {
    return std::string(static_cast<std::size_t>(levels), '[') +
           std::string(static_cast<std::size_t>(levels), ']');
  };
  EXPECT_TRUE(accepts(nested(k_max_json_depth)));
  EXPECT_FALSE(accepts(nested(k_max_json_depth + 1)));
  // A result sits at depth 2 of its body: 62 more levels are fine.
  EXPECT_EQ(as_result(nested(k_max_json_depth - 1)), nested(k_max_json_depth - 1));
  EXPECT_EQ(as_result(nested(k_max_json_depth)), "! JSON body nested deeper than 64 levels");
  std::string objects;
  for (int i = 0; i < k_max_json_depth - 1; ++i) objects += R"({"a":)";
  EXPECT_FALSE(as_result(objects + "1" + std::string(k_max_json_depth - 1, '}')).starts_with("!"));
  EXPECT_EQ(as_result(objects + "[]" + std::string(k_max_json_depth - 1, '}')),
            "! JSON body nested deeper than 64 levels");
  EXPECT_TRUE(accepts("\"" + std::string(10000, '[') + "\""));
  // Huge or unbalanced depth: an error, never a crash.
  EXPECT_FALSE(accepts(std::string(1'000'000, '[')));
  EXPECT_FALSE(accepts(nested(1'000'000)));
  EXPECT_FALSE(accepts(std::string(1'000'000, ']')));
  EXPECT_FALSE(accepts(std::string(1'000'000, '{')));
  EXPECT_TRUE(as_result(nested(1'000'000)).starts_with("! "));
}

TEST(JsonTest, DuplicateKeysInResultsAreErrorsNamingThePath) {
  EXPECT_EQ(as_result(R"({"a":1,"b":2,"a":3})"), "! duplicate field 'result.a' in the JSON body");
  EXPECT_EQ(as_result(R"([[0,[1,{"k":1,"k":2}]]])"),
            "! duplicate field 'result[0][1][1].k' in the JSON body");
  EXPECT_EQ(as_result(R"({"a":1,"\u0061":2})"), "! duplicate field 'result.a' in the JSON body");
  // Large objects (sorted check) too, wherever the pair is.
  for (int dup_at : {0, 17, 99}) {
    std::string big = "{";
    for (int i = 0; i < 100; ++i)
      big += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
    big += "\"k" + std::to_string(dup_at) + "\":0}";
    EXPECT_EQ(as_result(big),
              "! duplicate field 'result.k" + std::to_string(dup_at) + "' in the JSON body");
  }
  std::string wide = "{";
  for (int i = 0; i < 5000; ++i) wide += (i ? ",\"" : "\"") + std::to_string(i) + "\":" + "[]";
  EXPECT_FALSE(as_result(wide + "}").starts_with("!"));
  // Equal keys in different objects are fine.
  EXPECT_EQ(as_result(R"([{"a":1},{"a":2}])"), R"([{"a":1},{"a":2}])");
}

// ---- writers -------------------------------------------------------------------------

TEST(JsonTest, StringWriterRoundTrips) {
  std::string all;
  for (int c = 0; c < 0x80; ++c) all.push_back(static_cast<char>(c));
  all += "\xC3\xA9\xF0\x9F\x98\x80";
  std::string out;
  append_json_string(out, all);
  EXPECT_EQ(json::parse(out), all);
  // And simdjson reads back what was written.
  EXPECT_EQ(json_field("{\"a\":" + out + "}", "a").value(), all);
  out.clear();
  append_json_int(out, std::int64_t{-9223372036854775807 - 1});
  out += ',';
  append_json_int(out, std::uint64_t{18446744073709551615ull});
  EXPECT_EQ(out, "-9223372036854775808,18446744073709551615");
}

// ---- differential test against nlohmann::json ---------------------------------------

class text_gen {
 public:
  explicit text_gen(std::uint32_t seed) : rng_(seed) {}

  // A value nested up to depth levels; with few_keys, objects draw their
  // keys from two names, so that some repeat.
  std::string value(int depth, bool few_keys = false) {
    few_keys_ = few_keys;
    std::string out;
    append_value(out, depth);
    return out;
  }

  // A random edit of text: flip, insert, delete or truncate.
  std::string mutate(std::string text) {
    static const std::string k_bytes =
        std::string("{}[]\",:\\/-+.eE0123456789 \t\n\rtrufalsn\x01\x1f\x7f") +
        "\x80\xBB\xBF\xC0\xC3\xE0\xED\xEF\xF0\xF4\xF5\xFF";
    const int edits = 1 + pick(3);
    for (int i = 0; i < edits && !text.empty(); ++i) {
      const std::size_t at = static_cast<std::size_t>(pick(static_cast<int>(text.size())));
      const char b = k_bytes[static_cast<std::size_t>(pick(static_cast<int>(k_bytes.size())))];
      switch (pick(4)) {
        case 0:
          text[at] = b;
          break;
        case 1:
          text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), b);
          break;
        case 2:
          text.erase(at, 1);
          break;
        default:
          text.resize(at);
      }
    }
    return text;
  }

 private:
  int pick(int n) { return static_cast<int>(rng_() % static_cast<std::uint32_t>(n)); }

  void ws(std::string& out) {
    static const char k_ws[] = {' ', '\t', '\n', '\r'};
    if (pick(4) != 0) return;
    for (int n = 1 + pick(3); n > 0; --n) out.push_back(k_ws[pick(4)]);
  }

  void append_value(std::string& out, int depth) {
    ws(out);
    const int kind = depth <= 0 ? pick(4) : pick(7);
    switch (kind) {
      case 0:
        out += pick(3) == 0 ? "null" : (pick(2) != 0 ? "true" : "false");
        break;
      case 1:
        number(out);
        break;
      case 2:
      case 3:
        string(out);
        break;
      case 4:
      case 5: {
        out.push_back('{');
        const int n = pick(5);
        for (int i = 0; i < n; ++i) {
          if (i > 0) out.push_back(',');
          ws(out);
          // Unique keys unless asked: the parser rejects duplicates,
          // nlohmann does not. "k\u0030" is "k0".
          const int key = few_keys_ ? pick(2) : i;
          out += pick(3) == 0 ? "\"k\\u003" + std::to_string(key) + "\""
                              : "\"k" + std::to_string(key) + "\"";
          ws(out);
          out.push_back(':');
          append_value(out, depth - 1);
        }
        ws(out);
        out.push_back('}');
        break;
      }
      default: {
        out.push_back('[');
        const int n = pick(5);
        for (int i = 0; i < n; ++i) {
          if (i > 0) out.push_back(',');
          append_value(out, depth - 1);
        }
        ws(out);
        out.push_back(']');
      }
    }
    ws(out);
  }

  void digits(std::string& out, int max) {
    for (int n = 1 + pick(max); n > 0; --n) out.push_back(static_cast<char>('0' + pick(10)));
  }

  void number(std::string& out) {
    if (pick(2) != 0) out.push_back('-');
    if (pick(3) == 0) {
      out.push_back('0');
    } else {
      out.push_back(static_cast<char>('1' + pick(9)));
      if (pick(2) != 0) digits(out, pick(6) == 0 ? 25 : 5);
    }
    if (pick(3) == 0) {
      out.push_back('.');
      digits(out, 6);
    }
    if (pick(4) == 0) {
      out.push_back(pick(2) != 0 ? 'e' : 'E');
      if (pick(2) != 0) out.push_back(pick(2) != 0 ? '+' : '-');
      digits(out, 3);
    }
  }

  void string(std::string& out) {
    static const char* const k_pieces[] = {"a",
                                           "Z",
                                           " ",
                                           "\\\"",
                                           "\\\\",
                                           "\\/",
                                           "\\b",
                                           "\\f",
                                           "\\n",
                                           "\\r",
                                           "\\t",
                                           "\\u0041",
                                           "\\u00e9",
                                           "\\u0000",
                                           "\\uFFFF",
                                           "\xC3\xA9",
                                           "\xE2\x82\xAC",
                                           "\xF0\x9F\x98\x80",
                                           "\xED\x9F\xBF",
                                           "\xEE\x80\x80",
                                           "\xF4\x8F\xBF\xBF",
                                           "\\ud83d\\ude00",
                                           "\x7F",
                                           "0123456789abcdef"};
    out.push_back('"');
    for (int n = pick(8); n > 0; --n) out += k_pieces[pick(static_cast<int>(std::size(k_pieces)))];
    out.push_back('"');
  }

  std::mt19937 rng_;
  bool few_keys_ = false;
};

// Whether some object of text (which nlohmann accepts) has a key twice.
bool has_duplicate_keys(const std::string& text) {
  struct finder : nlohmann::json_sax<json> {
    std::vector<std::vector<std::string>> open;
    bool found = false;
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(std::int64_t) override { return true; }
    bool number_unsigned(std::uint64_t) override { return true; }
    bool number_float(double, const std::string&) override { return true; }
    bool string(std::string&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override {
      open.emplace_back();
      return true;
    }
    bool key(std::string& k) override {
      auto& keys = open.back();
      if (std::find(keys.begin(), keys.end(), k) != keys.end()) found = true;
      keys.push_back(k);
      return true;
    }
    bool end_object() override {
      open.pop_back();
      return true;
    }
    bool start_array(std::size_t) override { return true; }
    bool end_array() override { return true; }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
      return false;
    }
  } f;
  json::sax_parse(text, &f);
  return f.found;
}

TEST(JsonTest, AgreesWithNlohmannOnRandomTexts) {
  text_gen gen(20240611);
  int accepted = 0, rejected = 0, duplicates = 0;
  for (int i = 0; i < 10000; ++i) {
    std::string text = gen.value(4, i % 8 == 0);
    if (i % 2 == 1) text = gen.mutate(std::move(text));
    SCOPED_TRACE(::testing::PrintToString(text));
    const bool ours = accepts(text);
    const bool theirs = json::accept(text);
    if (!ours && theirs && has_duplicate_keys(text)) {
      ++duplicates;  // nlohmann accepts them
      continue;
    }
    ASSERT_EQ(ours, theirs);
    if (!ours) {
      ++rejected;
      continue;
    }
    ++accepted;
    ASSERT_FALSE(has_duplicate_keys(text));
    // As a result: stored minified, the same JSON.
    if (text.starts_with("\xEF\xBB\xBF")) continue;  // a BOM only starts a document
    const std::string stored = as_result(text);
    if (stored == "! result must not be null") continue;
    ASSERT_FALSE(stored.starts_with("!")) << stored;
    ASSERT_EQ(json::parse(stored), json::parse(text)) << stored;
    ASSERT_EQ(as_result(stored), stored);  // minified already
  }
  // The corpus exercises both sides.
  EXPECT_GT(accepted, 1000);
  EXPECT_GT(rejected, 500);
  EXPECT_GT(duplicates, 100);
}

// append_json_string skips clean 8-byte blocks at once: every special byte
// at every offset of strings of many lengths must still be escaped, and the
// output must decode to the input.
TEST(JsonTest, AppendJsonStringEscapesAtEveryOffset) {
  const std::string specials = std::string("\"\\\n\r\t\b\f\x01\x1f", 9) + std::string(1, '\0');
  for (std::size_t len = 1; len <= 40; ++len) {
    for (std::size_t at = 0; at < len; ++at) {
      for (char c : specials) {
        std::string in(len, 'a');
        in[at] = c;
        // A UTF-8 "é" elsewhere passes through unescaped.
        const std::size_t u = (at + 3) % len;
        if (u + 1 < len && u != at && u + 1 != at) {
          in[u] = '\xc3';
          in[u + 1] = '\xa9';
        }
        std::string out;
        append_json_string(out, in);
        ASSERT_EQ(json::parse(out).get<std::string>(), in) << "len " << len << " at " << at;
        ASSERT_EQ(out.find(c == '\0' ? '\0' : '\x01'), std::string::npos);
      }
    }
  }
  std::string out;
  append_json_string(out, "0123456789abcdef0123456789");
  EXPECT_EQ(out, "\"0123456789abcdef0123456789\"");
}

// The escaper's exact bytes, which clients see: '"', '\\' and the control
// characters escaped (\b \f \n \r \t short, the others \u00XX in lower
// case), everything else (DEL, UTF-8, any byte >= 0x80) passed through.
std::string reference_escape(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          static constexpr char hex[] = "0123456789abcdef";
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 0xf];
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

TEST(JsonTest, AppendJsonStringExactBytes) {
  std::string all;
  for (int c = 0; c < 0x100; ++c) all.push_back(static_cast<char>(c));
  std::string out;
  append_json_string(out, all);
  std::string want = "\"";
  want += R"(\u0000\u0001\u0002\u0003\u0004\u0005\u0006\u0007\b\t\n\u000b\f\r\u000e\u000f)";
  want += R"(\u0010\u0011\u0012\u0013\u0014\u0015\u0016\u0017\u0018\u0019\u001a\u001b\u001c)";
  want += R"(\u001d\u001e\u001f !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\])";
  want += "^_`abcdefghijklmnopqrstuvwxyz{|}~\x7f";
  for (int c = 0x80; c < 0x100; ++c) want.push_back(static_cast<char>(c));
  want += "\"";
  EXPECT_EQ(out, want);
  EXPECT_EQ(out, reference_escape(all));
  // Appends: what is already in out stays.
  out = "x";
  append_json_string(out, "\xC3\xA9\xF0\x9F\x98\x80 caf\xC3\xA9");
  EXPECT_EQ(out, "x\"\xC3\xA9\xF0\x9F\x98\x80 caf\xC3\xA9\"");
  out = "y";
  append_json_string(out, "");
  EXPECT_EQ(out, "y\"\"");
  // A long clean run, alone and with a special byte at its start, middle
  // and end.
  std::string clean;
  for (int i = 0; i < 5000; ++i) clean.push_back(static_cast<char>(' ' + (i * 7) % 95));
  std::erase_if(clean, [](char c) { return c == '"' || c == '\\'; });
  out.clear();
  append_json_string(out, clean);
  EXPECT_EQ(out, "\"" + clean + "\"");
  for (std::size_t at : {std::size_t{0}, clean.size() / 2, clean.size() - 1}) {
    std::string in = clean;
    in[at] = '\x1b';
    out.clear();
    append_json_string(out, in);
    EXPECT_EQ(out, reference_escape(in)) << at;
    EXPECT_EQ(out.size(), clean.size() + 2 + 5);
  }
}

TEST(JsonTest, AppendJsonStringMatchesTheReferenceOnRandomStrings) {
  std::mt19937 rng(32);
  // Strings of every length up to 200 with few, some and many special bytes,
  // drawn from printable ASCII, the specials and high bytes.
  const std::string specials = std::string("\"\\\b\f\n\r\t\x01\x1f\x7f\x80\xff", 12) + '\0';
  for (int round = 0; round < 3000; ++round) {
    const std::size_t len = rng() % 201;
    const unsigned density = std::array<unsigned, 4>{0, 2, 20, 80}[round % 4];
    std::string in(len, 'a');
    for (auto& c : in) {
      c = rng() % 100 < density
              ? specials[rng() % specials.size()]
              : static_cast<char>(rng() % 2 ? ' ' + rng() % 95 : 0x80 + rng() % 128);
    }
    std::string out = "pre";
    append_json_string(out, in);
    ASSERT_EQ(out, "pre" + reference_escape(in)) << "round " << round;
  }
}

}  // namespace
}  // namespace onceq::http
