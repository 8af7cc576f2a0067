// JSON Schema compilation: what is refused (by keyword name), the exact sets of integers and
// decimals that bounds admit, property order and optional members, additional properties that
// can never repeat a declared key, canonical strings, the whitespace rule, and forced text.
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "grammar/matcher.h"
#include "grammar/regex.h"
#include "grammar_test_util.h"

namespace fg::grammar {
namespace {

using test::byte_vocab;

std::shared_ptr<const TokenGrammar> bind(Result<Grammar> g) {
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return TokenGrammar::build(std::make_shared<const Grammar>(std::move(g).value()), byte_vocab());
}

std::shared_ptr<const TokenGrammar> schema(const std::string& text, JsonSchemaOptions o = {}) {
  return bind(compile_json_schema(std::string_view(text), o));
}

// The whole text is a sentence of the grammar.
bool matches(const std::shared_ptr<const TokenGrammar>& tg, const std::string& text) {
  GrammarMatcher m(tg);
  return (text.empty() || m.accept_bytes(text)) && m.accepted();
}

Status compile_status(const std::string& text) {
  return compile_json_schema(std::string_view(text)).status();
}

TEST(JsonSchema, RefusesUnsupportedKeywordsByName) {
  for (const char* k :
       {"not", "if", "multipleOf", "patternProperties", "propertyNames", "minProperties", "maxProperties",
        "dependentRequired", "dependentSchemas", "unevaluatedProperties", "contains", "$dynamicRef"}) {
    const std::string s = std::string(R"({"type": "object", "properties": {"a": {")") + k + R"(": {}}}})";
    const Status st = compile_status(s);
    EXPECT_EQ(st.code(), ErrorCode::kUnsupported) << k << ": " << st.to_string();
    EXPECT_NE(st.message().find(std::string("unsupported JSON Schema keyword '") + k + "'"), std::string::npos)
        << st.message();
    EXPECT_NE(st.message().find("#/properties/a"), std::string::npos) << st.message();
  }
  EXPECT_NE(compile_status(R"({"type": "array", "uniqueItems": true})").message().find("'uniqueItems'"),
            std::string::npos);
  EXPECT_TRUE(compile_status(R"({"type": "array", "uniqueItems": false})").is_ok());
  const Status fmt = compile_status(R"({"type": "string", "format": "iri-reference"})");
  EXPECT_EQ(fmt.code(), ErrorCode::kUnsupported);
  EXPECT_NE(fmt.message().find("unsupported JSON Schema format 'iri-reference'"), std::string::npos);
  EXPECT_NE(compile_status(R"({"type": "string", "pattern": "a+", "maxLength": 3})").message().find("'maxLength'"),
            std::string::npos);
  EXPECT_NE(compile_status(R"({"type": "number", "minimum": 0.5})").message().find("'minimum'"), std::string::npos);
  const Status look = compile_status(R"j({"type": "string", "pattern": "a(?=b)"})j");
  EXPECT_EQ(look.code(), ErrorCode::kUnsupported);
  EXPECT_NE(look.message().find("lookahead"), std::string::npos);
}

TEST(JsonSchema, RejectsMalformedSchemas) {
  EXPECT_EQ(compile_status("{not json").code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(compile_status(R"({"$ref": "#/$defs/missing"})").code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(compile_status(R"({"type": "strin"})").code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(compile_status(R"({"enum": []})").code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(compile_status("false").code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(compile_status(R"({"type": "integer", "minimum": 5, "maximum": 4})").code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(compile_status(R"({"$ref": "https://example.com/s.json"})").code(), ErrorCode::kUnsupported);
  // Annotations and keywords JSON Schema does not define are ignored.
  EXPECT_TRUE(
      compile_status(R"({"type": "string", "title": "t", "description": "d", "x-order": 1, "foo": 2})").is_ok());
}

TEST(JsonSchema, IntegerBoundsAdmitExactlyTheRange) {
  struct Case {
    std::string bounds;
    int64_t lo, hi;
  };
  const std::vector<Case> cases = {
      {R"("minimum": -50, "maximum": 50)", -50, 50},
      {R"("exclusiveMinimum": 0, "exclusiveMaximum": 10)", 1, 9},
      {R"("minimum": 2.5, "maximum": 7.5)", 3, 7},
      {R"("minimum": -1000, "maximum": -3)", -1000, -3},
      {R"("minimum": 99, "maximum": 1234)", 99, 1234},
      {R"("maximum": 0)", INT64_MIN, 0},
      {R"("minimum": 5)", 5, INT64_MAX},
      {R"("minimum": 5, "exclusiveMinimum": true, "maximum": 9, "exclusiveMaximum": true, "$schema": "draft-04")", 6,
       8},
  };
  for (const Case& c : cases) {
    auto tg = schema(R"({"type": "integer", )" + c.bounds + "}");
    for (int64_t n = -1500; n <= 1500; ++n)
      ASSERT_EQ(matches(tg, std::to_string(n)), n >= c.lo && n <= c.hi) << c.bounds << " n=" << n;
    EXPECT_FALSE(matches(tg, "-0"));
    EXPECT_FALSE(matches(tg, "007"));
    EXPECT_FALSE(matches(tg, "1.0"));
  }
  auto big = schema(R"({"type": "integer", "minimum": 1000000, "maximum": 99999999})");
  for (int64_t n : {999999, 1000000, 1000001, 5555555, 99999999, 100000000, 123456789})
    EXPECT_EQ(matches(big, std::to_string(n)), n >= 1000000 && n <= 99999999) << n;
  auto unbounded = schema(R"({"type": "integer"})");
  EXPECT_TRUE(matches(unbounded, "-123456789012345678"));
  EXPECT_FALSE(matches(unbounded, "1234567890123456789"));  // 19 digits: past the cap
}

TEST(JsonSchema, NumberBoundsAdmitOnlyValuesInRange) {
  struct Case {
    std::string bounds;
    double lo, hi;
    bool lo_open, hi_open;
  };
  const std::vector<Case> cases = {
      {R"("minimum": 0, "maximum": 1)", 0, 1, false, false},
      {R"("exclusiveMinimum": 0, "maximum": 100)", 0, 100, true, false},
      {R"("minimum": -10, "exclusiveMaximum": -2)", -10, -2, false, true},
      {R"("exclusiveMinimum": -3, "exclusiveMaximum": 3)", -3, 3, true, true},
      {R"("minimum": 7)", 7, INFINITY, false, false},
      {R"("exclusiveMaximum": 0)", -INFINITY, 0, false, true},
  };
  std::vector<std::string> samples;
  for (const char* s :
       {"0",        "-0",    "0.0",      "0.000001", "-0.5",      "1",         "1.0",        "1.000000", "1.000001",
        "0.999999", "2",     "-2",       "-2.0",     "-2.000001", "-1.999999", "3",          "2.999999", "-3",
        "-3.5",     "7",     "6.999999", "7.000001", "10.25",     "-10",       "-10.000001", "-9.9",     "99.999999",
        "100",      "100.0", "100.5",    "1e2",      "01",        "1.",        ".5",         "1.0000001"})
    samples.push_back(s);
  for (const Case& c : cases) {
    auto tg = schema(R"({"type": "number", )" + c.bounds + "}");
    int admitted = 0;
    for (const std::string& s : samples) {
      const double v = std::strtod(s.c_str(), nullptr);
      const bool in_range = (c.lo_open ? v > c.lo : v >= c.lo) && (c.hi_open ? v < c.hi : v <= c.hi);
      // No exponent, at most 6 fraction digits, canonical integer part: the generated subset.
      const bool canonical = s.find_first_of("eE") == std::string::npos && s != "-0" && s.rfind("01", 0) != 0 &&
                             s.back() != '.' && s[0] != '.' && s != "1.0000001" && s != "-0.0";
      if (matches(tg, s)) {
        ++admitted;
        EXPECT_TRUE(in_range) << c.bounds << " admits " << s;
      } else {
        EXPECT_FALSE(in_range && canonical) << c.bounds << " refuses " << s;
      }
    }
    EXPECT_GT(admitted, 0) << c.bounds;
  }
}

TEST(JsonSchema, PropertiesInOrderWithOptionalMembers) {
  auto tg = schema(R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                       "c": {"type": "integer"}}, "required": ["a", "c"]})");
  EXPECT_TRUE(matches(tg, R"({"a": 1, "c": 2})"));
  EXPECT_TRUE(matches(tg, R"({"a": 1, "b": 2, "c": 3})"));
  EXPECT_FALSE(matches(tg, R"({"c": 2, "a": 1})"));
  EXPECT_FALSE(matches(tg, R"({"a": 1})"));
  EXPECT_FALSE(matches(tg, R"({"a": 1, "c": 2, "d": 3})"));  // strict: no unlisted properties
  EXPECT_FALSE(matches(tg, R"({"a": 1,"c": 2})"));           // ", " is the separator
  auto all_optional = schema(R"({"properties": {"x": {"type": "null"}, "y": {"type": "null"}}})");
  for (const char* s : {"{}", R"({"x": null})", R"({"y": null})", R"({"x": null, "y": null})"})
    EXPECT_TRUE(matches(all_optional, s)) << s;
  EXPECT_FALSE(matches(all_optional, R"({, "y": null})"));
}

TEST(JsonSchema, AdditionalPropertiesNeverRepeatDeclaredKeys) {
  auto tg = schema(R"({"type": "object", "properties": {"name": {"type": "string"}},
                       "additionalProperties": {"type": "integer"}})");
  EXPECT_TRUE(matches(tg, R"({"name": "x", "age": 3})"));
  EXPECT_TRUE(matches(tg, R"({"nam": 3, "names": 4, "": 5})"));
  EXPECT_FALSE(matches(tg, R"({"name": "x", "name": 3})"));
  EXPECT_FALSE(matches(tg, R"({"name": 3})"));
  EXPECT_FALSE(matches(tg, R"({"age": "x"})"));
  auto open = schema(R"({"type": "object", "properties": {"id": {"type": "string"}}})",
                     JsonSchemaOptions{JsonWhitespace::kSpaced, /*strict_properties=*/false, {}});
  EXPECT_TRUE(matches(open, R"({"id": "a", "other": [1, {"k": null}]})"));
}

TEST(JsonSchema, StringsAreCanonicalUtf8) {
  auto tg = schema(R"({"type": "string"})");
  EXPECT_TRUE(matches(tg, "\"caf\xC3\xA9 \\\"q\\\" \\\\ \\n \\t \\b \xF0\x9F\x98\x80\""));
  EXPECT_FALSE(matches(tg, "\"\\u001f\""));       // rare control characters are not generated
  EXPECT_FALSE(matches(tg, "\"\\u0041\""));       // \u escape of a printable character
  EXPECT_FALSE(matches(tg, "\"\\/\""));           // the optional escape of '/'
  EXPECT_FALSE(matches(tg, "\"a\nb\""));          // raw control character
  EXPECT_FALSE(matches(tg, "\"\xC3(\""));         // broken UTF-8
  EXPECT_FALSE(matches(tg, "\"\xED\xA0\x80\""));  // an encoded surrogate
  EXPECT_FALSE(matches(tg, "\"\xC0\xAF\""));      // overlong
  auto len = schema(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_FALSE(matches(len, "\"a\""));
  EXPECT_TRUE(matches(len, "\"\xC3\xA9\\n\""));  // two characters, four bytes
  EXPECT_TRUE(matches(len, "\"abc\""));
  EXPECT_FALSE(matches(len, "\"abcd\""));
}

TEST(JsonSchema, WhitespaceStyles) {
  const std::string s = R"({"const": {"a": [1, 2], "b": {}}})";
  GrammarMatcher spaced(schema(s));
  EXPECT_EQ(spaced.forced_continuation(), R"({"a": [1, 2], "b": {}})");
  GrammarMatcher compact(schema(s, JsonSchemaOptions{JsonWhitespace::kCompact, true, {}}));
  EXPECT_EQ(compact.forced_continuation(), R"({"a":[1,2],"b":{}})");
  auto flex = schema(R"({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}})",
                     JsonSchemaOptions{JsonWhitespace::kFlexible, true, {}});
  EXPECT_TRUE(matches(flex, R"({"a":[1,2]})"));
  EXPECT_TRUE(matches(flex, R"({ "a" : [ 1 , 2 ] })"));
  EXPECT_FALSE(matches(flex, R"({  "a":[1]})"));
  EXPECT_FALSE(matches(flex, "{\n\"a\":[1]}"));
}

TEST(JsonSchema, ForcedTextFollowsTheSchema) {
  GrammarMatcher m(schema(R"({"type": "object", "properties": {"name": {"type": "string"},
                              "kind": {"const": "person"}, "age": {"type": "integer"}}, "required": ["name", "kind"]})"));
  EXPECT_EQ(m.forced_continuation(), R"({"name": ")");
  ASSERT_TRUE(m.accept_bytes("{\"name\": \"Al"));
  EXPECT_EQ(m.forced_continuation(), "");
  ASSERT_TRUE(m.accept_bytes("\""));
  EXPECT_EQ(m.forced_continuation(), R"(, "kind": "person")");
  ASSERT_TRUE(m.accept_bytes(R"(, "kind": "person")"));
  EXPECT_FALSE(m.accepted());
  EXPECT_EQ(m.forced_continuation(), "");  // "," or "}"
  ASSERT_TRUE(m.accept_bytes("}"));
  EXPECT_TRUE(m.is_terminated());
}

TEST(JsonSchema, RecursiveReferencesNest) {
  auto tg = schema(R"({"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array",
                       "items": {"$ref": "#"}}}, "required": ["v", "kids"]})");
  EXPECT_TRUE(matches(tg, R"({"v": 1, "kids": [{"v": 2, "kids": []}, {"v": 3, "kids": [{"v": 4, "kids": []}]}]})"));
  EXPECT_FALSE(matches(tg, R"({"v": 1, "kids": [{"v": 2}]})"));
  GrammarMatcher m(tg);
  ASSERT_TRUE(m.accept_bytes(R"({"v": 1, "kids": [{"v": 2, "kids": [{"v": 3, "kids": [)"));
  EXPECT_TRUE(test::mask_matches_brute_force(m));
}

TEST(JsonSchema, AnyJsonObject) {
  auto tg = bind(json_object_grammar());
  EXPECT_TRUE(matches(tg, "{}"));
  EXPECT_TRUE(matches(tg, R"({"a": [1, -2.5e3, "x", {"b": null}], "c": true})"));
  EXPECT_FALSE(matches(tg, "[]"));
  EXPECT_FALSE(matches(tg, R"({"a": 1,})"));
  EXPECT_FALSE(matches(tg, R"({"a": 01})"));
}

TEST(Regex, SubsetAndRefusals) {
  auto tg = bind(compile_regex("a{2,3}(b|cd)*[^x-z]?"));
  for (const char* s : {"aa", "aaa", "aab", "aacdb", "aabw", "aa\xC3\xA9"}) EXPECT_TRUE(matches(tg, s)) << s;
  for (const char* s : {"a", "aaaab", "aax", "aabx"}) EXPECT_FALSE(matches(tg, s)) << s;
  for (const char* p : {"(a)\\1", "a(?=b)", "a(?<=b)", "\\bword", "(?i)abc", "\\p{L}", "a*+"})
    EXPECT_EQ(compile_regex(p).status().code(), ErrorCode::kUnsupported) << p;
  for (const char* p : {"(ab", "[a-", "a{3,1}", "*a"})
    EXPECT_EQ(compile_regex(p).status().code(), ErrorCode::kInvalidArgument) << p;
  // Search semantics for JSON Schema patterns: unanchored sides admit anything.
  auto search = schema(R"({"type": "string", "pattern": "^ab"})");
  EXPECT_TRUE(matches(search, "\"abzz\""));
  EXPECT_FALSE(matches(search, "\"zab\""));
}

}  // namespace
}  // namespace fg::grammar
