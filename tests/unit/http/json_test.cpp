#include "http/json.hpp"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace onceq::http {
namespace {

using json = nlohmann::json;

// The DOM as nlohmann::json, to compare with what nlohmann reads.
json to_nlohmann(const jvalue& v) {
  switch (v.type()) {
    case jtype::null:
      return nullptr;
    case jtype::boolean:
      return v.as_bool();
    case jtype::number:
      return json::parse(v.number_text());
    case jtype::string:
      return std::string(v.str());
    case jtype::array: {
      json a = json::array();
      for (const jvalue& e : v.elements()) a.push_back(to_nlohmann(e));
      return a;
    }
    case jtype::object: {
      json o = json::object();
      for (const jmember& m : v.members()) o[std::string(m.key)] = to_nlohmann(m.value);
      return o;
    }
  }
  return nullptr;
}

bool accepts(std::string_view text) {
  jdoc doc;
  return doc.parse(text);
}

json_error error_of(std::string_view text) {
  jdoc doc;
  json_error e;
  EXPECT_FALSE(doc.parse(text, &e)) << text;
  return e;
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
    SCOPED_TRACE(text);
    ASSERT_TRUE(json::accept(text));  // the corpus itself is right
    jdoc doc;
    json_error e;
    ASSERT_TRUE(doc.parse(text, &e)) << e.message << " at " << e.offset;
    EXPECT_EQ(to_nlohmann(doc.root()), json::parse(text));
    EXPECT_EQ(json::parse(minified(doc.root())), json::parse(text));
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
  }
}

TEST(JsonTest, NulAfterTheValueIsTrailingText) {
  // nlohmann takes a NUL byte outside strings for the end of the input and
  // ignores what follows; this parser does not.
  const std::string text("{}\0garbage", 10);
  EXPECT_TRUE(json::accept(text));
  EXPECT_EQ(error_of(text).message, "unexpected text after the value");
}

TEST(JsonTest, ErrorsSayWhatAndWhere) {
  json_error e = error_of(R"({"a": tru})");
  EXPECT_EQ(e.code, json_errc::syntax);
  EXPECT_EQ(e.offset, 6u);
  e = error_of("{\"a\":\"x\x01\"}");
  EXPECT_EQ(e.message, "control character in string");
  EXPECT_EQ(e.offset, 7u);
  e = error_of("[\"\xC0\xAF\"]");
  EXPECT_EQ(e.message, "invalid UTF-8 in string");
  EXPECT_EQ(e.offset, 2u);
  EXPECT_EQ(error_of(R"("\ud800")").message, "high surrogate not followed by a low surrogate");
  EXPECT_EQ(error_of(R"("\udc00")").message, "lone low surrogate in string");
  EXPECT_EQ(error_of("1e400").message, "number out of range");
  EXPECT_EQ(error_of("{} x").message, "unexpected text after the value");
}

TEST(JsonTest, NumbersKeepTheirText) {
  jdoc doc;
  ASSERT_TRUE(doc.parse(R"([0,-12,1.50,2e3,-0,18446744073709551616])"));
  auto e = doc.root().elements();
  ASSERT_EQ(e.size(), 6u);
  EXPECT_TRUE(e[0].is_integer());
  EXPECT_EQ(e[1].number_text(), "-12");
  EXPECT_TRUE(e[1].is_integer());
  EXPECT_EQ(e[2].number_text(), "1.50");
  EXPECT_FALSE(e[2].is_integer());
  EXPECT_TRUE(e[2].is_number());
  EXPECT_FALSE(e[3].is_integer());
  EXPECT_TRUE(e[4].is_integer());
  EXPECT_EQ(e[5].number_text(), "18446744073709551616");
  EXPECT_TRUE(e[5].is_integer());
  EXPECT_EQ(e[5].str(), "");  // not a string
}

TEST(JsonTest, StringsAreViewedInPlaceOrDecoded) {
  const std::string text = R"({"plain":"abc","esc":"a\nb\u00e9\ud83d\ude00","k\"ey":1})";
  jdoc doc;
  ASSERT_TRUE(doc.parse(text));
  const jvalue* plain = doc.root().find("plain");
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->str(), "abc");
  // No escape: a view of the input itself.
  EXPECT_GE(plain->str().data(), text.data());
  EXPECT_LT(plain->str().data(), text.data() + text.size());
  EXPECT_EQ(doc.root().find("esc")->str(), "a\nb\xC3\xA9\xF0\x9F\x98\x80");
  EXPECT_EQ(doc.root().find("esc")->raw(), R"("a\nb\u00e9\ud83d\ude00")");
  EXPECT_NE(doc.root().find("k\"ey"), nullptr);
  EXPECT_EQ(doc.root().find("missing"), nullptr);

  jdoc nul;
  ASSERT_TRUE(nul.parse(R"("a\u0000b")"));
  EXPECT_EQ(nul.root().str(), std::string_view("a\0b", 3));
}

TEST(JsonTest, SpecialBytesAtEveryPositionOfAWord) {
  // The string scanner reads 8 bytes at a time: put each kind of special
  // byte at each offset of the first words.
  const std::vector<std::pair<std::string, std::string>> specials = {
      {"\\n", "\n"},
      {"\\\"", "\""},
      {"\xC3\xA9", "\xC3\xA9"},
      {"\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80"}};
  for (std::size_t pos = 0; pos < 20; ++pos) {
    for (const auto& [written, decoded] : specials) {
      const std::string text =
          "\"" + std::string(pos, 'x') + written + std::string(20 - pos, 'y') + "\"";
      jdoc doc;
      ASSERT_TRUE(doc.parse(text)) << pos;
      EXPECT_EQ(doc.root().str(), std::string(pos, 'x') + decoded + std::string(20 - pos, 'y'));
    }
    std::string bad = "\"" + std::string(pos, 'x') + "\x01" + std::string(20 - pos, 'y') + "\"";
    EXPECT_FALSE(accepts(bad)) << pos;
    std::string bad_utf8 =
        "\"" + std::string(pos, 'x') + "\xC0\x80" + std::string(20 - pos, 'y') + "\"";
    EXPECT_FALSE(accepts(bad_utf8)) << pos;
    // Unterminated at every length.
    EXPECT_FALSE(accepts("\"" + std::string(pos, 'x'))) << pos;
  }
}

// ---- structure -----------------------------------------------------------------------

TEST(JsonTest, ObjectsKeepInputOrder) {
  jdoc doc;
  ASSERT_TRUE(doc.parse(R"({"z":1,"a":2,"m":{"y":true,"b":false}})"));
  auto m = doc.root().members();
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].key, "z");
  EXPECT_EQ(m[1].key, "a");
  EXPECT_EQ(m[2].key, "m");
  EXPECT_EQ(m[2].value.members()[0].key, "y");
  EXPECT_TRUE(m[2].value.members()[0].value.as_bool());
  EXPECT_FALSE(m[2].value.members()[1].value.as_bool());
  EXPECT_EQ(doc.root().size(), 3u);
  EXPECT_TRUE(m[0].value.members().empty());  // not an object
  EXPECT_TRUE(m[0].value.elements().empty());
}

TEST(JsonTest, NestingLimit) {
  auto nested = [](int levels) {
    return std::string(static_cast<std::size_t>(levels), '[') +
           std::string(static_cast<std::size_t>(levels), ']');
  };
  EXPECT_TRUE(accepts(nested(k_max_json_depth)));
  EXPECT_EQ(error_of(nested(k_max_json_depth + 1)).code, json_errc::too_deep);
  // Objects count the same; strings do not.
  std::string objects;
  for (int i = 0; i < k_max_json_depth; ++i) objects += R"({"a":)";
  EXPECT_TRUE(accepts(objects + "1" + std::string(k_max_json_depth, '}')));
  EXPECT_EQ(error_of(objects + "[]" + std::string(k_max_json_depth, '}')).code,
            json_errc::too_deep);
  EXPECT_TRUE(accepts("\"" + std::string(10000, '[') + "\""));
  // Huge or unbalanced depth: an error, never a crash.
  EXPECT_EQ(error_of(std::string(1'000'000, '[')).code, json_errc::too_deep);
  EXPECT_EQ(error_of(nested(1'000'000)).code, json_errc::too_deep);
  EXPECT_EQ(error_of(std::string(1'000'000, ']')).code, json_errc::syntax);
  EXPECT_EQ(error_of(std::string(1'000'000, '{')).code, json_errc::syntax);  // '{' is not a key
}

TEST(JsonTest, DuplicateKeysAreErrorsNamingThePath) {
  json_error e = error_of(R"({"a":1,"b":2,"a":3})");
  EXPECT_EQ(e.code, json_errc::duplicate_key);
  EXPECT_EQ(e.message, "duplicate key 'a'");
  EXPECT_EQ(e.path, "a");
  e = error_of(R"({"messages":[{"v":1},{"v":2},{"envelope":{"x":[],"x":{}}}]})");
  EXPECT_EQ(e.code, json_errc::duplicate_key);
  EXPECT_EQ(e.path, "messages[2].envelope.x");
  e = error_of(R"([[0,[1,{"k":1,"k":2}]]])");
  EXPECT_EQ(e.path, "[0][1][1].k");
  // Decoded keys compare: "\u0061" is "a".
  EXPECT_EQ(error_of(R"({"a":1,"\u0061":2})").code, json_errc::duplicate_key);
  // Large objects (sorted check) too, wherever the pair is.
  for (int dup_at : {0, 17, 99}) {
    std::string big = "{";
    for (int i = 0; i < 100; ++i)
      big += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
    big += "\"k" + std::to_string(dup_at) + "\":0}";
    e = error_of(big);
    EXPECT_EQ(e.code, json_errc::duplicate_key);
    EXPECT_EQ(e.path, "k" + std::to_string(dup_at));
  }
  std::string wide = "{";
  for (int i = 0; i < 5000; ++i) wide += (i ? ",\"" : "\"") + std::to_string(i) + "\":" + "[]";
  EXPECT_TRUE(accepts(wide + "}"));
  // Equal keys in different objects are fine.
  EXPECT_TRUE(accepts(R"([{"a":1},{"a":2}])"));
}

TEST(JsonTest, RawSpansAndMinify) {
  const std::string text =
      " { \"a\" : [ 1 , \"x y\" , { \"b\" : \"c \\\" d\\n\" } ] ,\n\t\"e\":{\"f\":[]},\"g\" : "
      "-1.5e3 } ";
  jdoc doc;
  ASSERT_TRUE(doc.parse(text));
  const jvalue& root = doc.root();
  EXPECT_EQ(root.raw(), text.substr(1, text.size() - 2));
  EXPECT_FALSE(root.compact());
  const jvalue* a = root.find("a");
  EXPECT_EQ(a->raw(), R"([ 1 , "x y" , { "b" : "c \" d\n" } ])");
  EXPECT_EQ(minified(*a), R"([1,"x y",{"b":"c \" d\n"}])");
  EXPECT_EQ(a->elements()[1].raw(), R"("x y")");
  EXPECT_EQ(root.find("e")->raw(), R"({"f":[]})");
  EXPECT_TRUE(root.find("e")->compact());
  EXPECT_EQ(root.find("g")->raw(), "-1.5e3");
  EXPECT_EQ(minified(root), R"({"a":[1,"x y",{"b":"c \" d\n"}],"e":{"f":[]},"g":-1.5e3})");
  // Escapes stay as written.
  ASSERT_TRUE(doc.parse(R"( [ "\u00e9\/" , "\\ \"" ] )"));
  EXPECT_EQ(minified(doc.root()), R"(["\u00e9\/","\\ \""])");
  std::string out = "prefix:";
  append_minified(out, doc.root().elements()[0]);
  EXPECT_EQ(out, R"(prefix:"\u00e9\/")");
  // A default value is null.
  EXPECT_EQ(minified(jvalue{}), "null");
}

TEST(JsonTest, DocumentsMoveWithTheirValues) {
  jdoc moved;
  {
    jdoc doc;
    ASSERT_TRUE(doc.parse_copy(R"({"s":"a\tb","n":[1]})"));  // short: SSO text
    moved = std::move(doc);
  }
  EXPECT_EQ(moved.root().find("s")->str(), "a\tb");
  EXPECT_EQ(moved.root().find("n")->raw(), "[1]");
  jdoc other(std::move(moved));
  EXPECT_EQ(other.root().find("s")->raw(), R"("a\tb")");
  // A failed parse leaves an empty document.
  EXPECT_FALSE(other.parse("{"));
  EXPECT_TRUE(other.root().is_null());
}

TEST(JsonTest, ManyValuesAndReuse) {
  std::string big = "[";
  for (int i = 0; i < 20000; ++i)
    big += (i ? "," : "") + std::string(R"({"i":)") + std::to_string(i) + "}";
  big += "]";
  for (int round = 0; round < 2; ++round) {
    jdoc doc;
    ASSERT_TRUE(doc.parse(big));
    ASSERT_EQ(doc.root().size(), 20000u);
    EXPECT_EQ(doc.root().elements()[19999].find("i")->number_text(), "19999");
    jdoc small;
    ASSERT_TRUE(small.parse(R"([1,[2,[3]]])"));
    EXPECT_EQ(small.root().elements()[1].elements()[1].elements()[0].number_text(), "3");
  }
}

// ---- writers -------------------------------------------------------------------------

TEST(JsonTest, StringWriterRoundTrips) {
  std::string all;
  for (int c = 0; c < 0x80; ++c) all.push_back(static_cast<char>(c));
  all += "\xC3\xA9\xF0\x9F\x98\x80";
  std::string out;
  append_json_string(out, all);
  EXPECT_EQ(json::parse(out), all);
  jdoc doc;
  ASSERT_TRUE(doc.parse(out));
  EXPECT_EQ(doc.root().str(), all);
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
    jdoc doc;
    json_error e;
    const bool ours = doc.parse(text, &e);
    const bool theirs = json::accept(text);
    if (!ours && theirs && e.code == json_errc::duplicate_key) {
      ASSERT_TRUE(has_duplicate_keys(text));  // nlohmann accepts them
      ++duplicates;
      continue;
    }
    if (ours) {
      ASSERT_FALSE(has_duplicate_keys(text));
    }
    ASSERT_EQ(ours, theirs) << (ours ? "" : e.message);
    if (!ours) {
      ++rejected;
      continue;
    }
    ++accepted;
    const json expected = json::parse(text);
    ASSERT_EQ(to_nlohmann(doc.root()), expected);
    const std::string mini = minified(doc.root());
    ASSERT_EQ(json::parse(mini), expected) << mini;
    // Minified means no whitespace outside strings: nlohmann's dump is as
    // long once strings are written alike.
    jdoc again;
    ASSERT_TRUE(again.parse(mini));
    ASSERT_TRUE(again.root().compact());
    ASSERT_EQ(minified(again.root()), mini);
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

}  // namespace
}  // namespace onceq::http
