// JSON Schema -> Grammar (see json_schema.h). Each value a schema describes becomes its own rule,
// so a property's value or an array item returns to one place and its token masks need no stack
// context; a $ref is compiled afresh at each use unless it is recursive (then its rule is shared).
#include "grammar/json_schema.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "grammar/regex.h"

namespace fg::grammar {

namespace {

using Json = nlohmann::ordered_json;

bool is_annotation(const std::string& k) {
  static const std::set<std::string> kAnnotations = {
      "title",   "description",   "default",          "examples",        "example",       "$schema",     "$id",
      "id",      "$comment",      "deprecated",       "readOnly",        "writeOnly",     "$defs",       "definitions",
      "$anchor", "discriminator", "contentMediaType", "contentEncoding", "contentSchema", "$vocabulary", "strict"};
  return kAnnotations.count(k) > 0 || k.rfind("x-", 0) == 0;
}

bool is_refused(const std::string& k) {
  static const std::set<std::string> kRefused = {"not",
                                                 "if",
                                                 "then",
                                                 "else",
                                                 "multipleOf",
                                                 "patternProperties",
                                                 "propertyNames",
                                                 "minProperties",
                                                 "maxProperties",
                                                 "dependentRequired",
                                                 "dependentSchemas",
                                                 "dependencies",
                                                 "unevaluatedProperties",
                                                 "unevaluatedItems",
                                                 "contains",
                                                 "minContains",
                                                 "maxContains",
                                                 "$dynamicRef",
                                                 "$recursiveRef",
                                                 "$dynamicAnchor",
                                                 "$recursiveAnchor"};
  return kRefused.count(k) > 0;
}

std::string escape_pointer(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

Status unsupported_keyword(const std::string& k, const std::string& path, const std::string& why = "") {
  return unsupported("unsupported JSON Schema keyword '" + k + "' at " + path + (why.empty() ? "" : " (" + why + ")"));
}

bool value_has_type(const Json& v, const std::string& t) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "integer")
    return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  if (t == "number") return v.is_number();
  if (t == "string") return v.is_string();
  if (t == "array") return v.is_array();
  if (t == "object") return v.is_object();
  return false;
}

class SchemaCompiler {
 public:
  SchemaCompiler(GrammarBuilder& b, JsonPieces& j, const Json& root, const JsonSchemaOptions& o)
      : b_(b), j_(j), root_(root), o_(o) {}

  // Compiles `root` into rule `id` (which "#" refers to).
  Status define_root(int32_t id) {
    active_["#"] = id;
    FG_ASSIGN_OR_RETURN(Expr body, value(root_, "#"));
    b_.set_body(id, std::move(body));
    return Status::ok();
  }

 private:
  Result<int32_t> rule_for(const Json& s, const std::string& path) {
    const int32_t id = b_.add_rule(path);
    FG_ASSIGN_OR_RETURN(Expr body, value(s, path));
    b_.set_body(id, std::move(body));
    if (b_.over_limit()) return invalid_argument("JSON Schema too large: its grammar passes the size limit at " + path);
    return id;
  }

  Status check_keywords(const Json& s, const std::string& path) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      if (is_refused(k)) return unsupported_keyword(k, path);
      if (k == "uniqueItems" && it->is_boolean() && it->get<bool>())
        return unsupported_keyword(k, path, "true is not enforced");
    }
    return Status::ok();
  }

  Result<const Json*> resolve(const std::string& ref, const std::string& path) {
    if (ref.empty() || ref[0] != '#')
      return unsupported("unsupported JSON Schema $ref '" + ref + "' at " + path +
                         " (only references into the document)");
    if (ref == "#") return &root_;
    try {
      const Json& target = root_.at(Json::json_pointer(ref.substr(1)));
      return &target;
    } catch (const std::exception&) {
      return invalid_argument("JSON Schema $ref '" + ref + "' at " + path + " points nowhere");
    }
  }

  // The union of two schemas' keywords (their conjunction when no keyword appears in both).
  Result<Json> merge(const Json& a, const Json& b, const std::string& keyword, const std::string& path) {
    if (b.is_boolean()) {
      if (b.get<bool>()) return a;
      return invalid_argument("JSON Schema at " + path + " admits no value ('" + keyword + "' with false)");
    }
    if (!b.is_object()) return invalid_argument("JSON Schema '" + keyword + "' at " + path + " holds a non-schema");
    Json out = a;
    for (auto it = b.begin(); it != b.end(); ++it) {
      if (is_annotation(it.key())) continue;
      if (out.contains(it.key()) && out[it.key()] != *it)
        return unsupported_keyword(keyword, path, "its parts constrain '" + it.key() + "' twice");
      out[it.key()] = *it;
    }
    return out;
  }

  // Drops annotation keywords and `drop`.
  static Json constraints(const Json& s, std::initializer_list<const char*> drop) {
    Json out = Json::object();
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (is_annotation(it.key())) continue;
      if (std::any_of(drop.begin(), drop.end(), [&](const char* d) { return it.key() == d; })) continue;
      out[it.key()] = *it;
    }
    return out;
  }

  Result<Expr> value(const Json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return Expr::call(j_.any_value_rule());
      return invalid_argument("JSON Schema 'false' at " + path + " admits no value");
    }
    if (!s.is_object()) return invalid_argument("JSON Schema at " + path + " is not an object or a boolean");
    FG_RETURN_IF_ERROR(check_keywords(s, path));

    if (s.contains("$ref")) {
      const Json rest = constraints(s, {"$ref"});
      if (!s["$ref"].is_string()) return invalid_argument("JSON Schema $ref at " + path + " is not a string");
      const std::string ref = s["$ref"].get<std::string>();
      if (!rest.empty()) {
        // $ref beside other constraints: both apply. Merge them when the target is not recursive.
        if (active_.count(ref)) return unsupported_keyword("$ref", path, "a recursive reference beside other keywords");
        FG_ASSIGN_OR_RETURN(const Json* target, resolve(ref, path));
        FG_ASSIGN_OR_RETURN(Json merged, merge(rest, *target, "$ref", path));
        return value(merged, path);
      }
      auto active = active_.find(ref);
      if (active != active_.end()) return Expr::call(active->second);
      FG_ASSIGN_OR_RETURN(const Json* target, resolve(ref, path));
      const int32_t id = b_.add_rule(ref);
      active_[ref] = id;
      auto body = value(*target, ref);
      active_.erase(ref);
      if (!body.is_ok()) return body.status();
      b_.set_body(id, std::move(body).value());
      return Expr::call(id);
    }
    if (s.contains("allOf")) {
      if (!s["allOf"].is_array() || s["allOf"].empty())
        return invalid_argument("JSON Schema allOf at " + path + " is not a non-empty array");
      Json merged = constraints(s, {"allOf"});
      for (const Json& part : s["allOf"]) {
        const Json* p = &part;
        if (part.is_object() && part.contains("$ref") && constraints(part, {"$ref"}).empty()) {
          const std::string ref = part["$ref"].get<std::string>();
          if (active_.count(ref)) return unsupported_keyword("allOf", path, "a recursive reference inside it");
          FG_ASSIGN_OR_RETURN(const Json* target, resolve(ref, path));
          p = target;
        }
        FG_ASSIGN_OR_RETURN(merged, merge(merged, *p, "allOf", path));
      }
      return value(merged, path);
    }
    for (const char* comb : {"anyOf", "oneOf"}) {
      if (!s.contains(comb)) continue;
      if (!s[comb].is_array() || s[comb].empty())
        return invalid_argument(std::string("JSON Schema ") + comb + " at " + path + " is not a non-empty array");
      const Json base = constraints(s, {comb});
      std::vector<Expr> alts;
      for (size_t i = 0; i < s[comb].size(); ++i) {
        const Json& sub = s[comb][i];
        const std::string sub_path = path + "/" + comb + "/" + std::to_string(i);
        if (base.empty()) {
          FG_ASSIGN_OR_RETURN(Expr e, value(sub, sub_path));
          alts.push_back(std::move(e));
          continue;
        }
        const Json* p = &sub;
        if (sub.is_object() && sub.contains("$ref") && constraints(sub, {"$ref"}).empty()) {
          const std::string ref = sub["$ref"].get<std::string>();
          if (active_.count(ref)) return unsupported_keyword(comb, path, "a recursive reference beside other keywords");
          FG_ASSIGN_OR_RETURN(const Json* target, resolve(ref, sub_path));
          p = target;
        }
        FG_ASSIGN_OR_RETURN(Json merged, merge(base, *p, comb, path));
        FG_ASSIGN_OR_RETURN(Expr e, value(merged, sub_path));
        alts.push_back(std::move(e));
      }
      return Expr::alt(std::move(alts));
    }

    // Types: given, or inferred from the keywords present (a value of another type would satisfy
    // the schema too; generating only these is a valid subset).
    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array()) {
        for (const Json& x : t) {
          if (!x.is_string()) return invalid_argument("JSON Schema type list at " + path + " holds a non-string");
          types.push_back(x.get<std::string>());
        }
      } else {
        return invalid_argument("JSON Schema type at " + path + " is not a string or a list");
      }
      for (const std::string& t1 : types) {
        static const std::set<std::string> kTypes = {"null",   "boolean", "integer", "number",
                                                     "string", "array",   "object"};
        if (!kTypes.count(t1)) return invalid_argument("JSON Schema type '" + t1 + "' at " + path + " is not a type");
      }
    } else {
      auto has_any = [&](std::initializer_list<const char*> ks) {
        return std::any_of(ks.begin(), ks.end(), [&](const char* k) { return s.contains(k); });
      };
      if (has_any({"properties", "required", "additionalProperties"})) types.push_back("object");
      if (has_any({"items", "prefixItems", "minItems", "maxItems", "additionalItems"})) types.push_back("array");
      if (has_any({"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
      if (has_any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) types.push_back("number");
    }
    if (s.contains("nullable") && s["nullable"].is_boolean() && s["nullable"].get<bool>() && !types.empty() &&
        std::find(types.begin(), types.end(), "null") == types.end())
      types.push_back("null");

    if (s.contains("const") || s.contains("enum")) {
      std::vector<Json> values;
      if (s.contains("const")) {
        values.push_back(s["const"]);
      } else {
        if (!s["enum"].is_array() || s["enum"].empty())
          return invalid_argument("JSON Schema enum at " + path + " is not a non-empty array");
        for (const Json& v : s["enum"]) values.push_back(v);
      }
      std::vector<Expr> alts;
      for (const Json& v : values) {
        if (!types.empty() &&
            std::none_of(types.begin(), types.end(), [&](const std::string& t) { return value_has_type(v, t); }))
          continue;
        alts.push_back(Expr::literal(j_.dump(v)));
      }
      if (alts.empty()) return invalid_argument("JSON Schema at " + path + " admits no value (enum/const vs type)");
      return Expr::alt(std::move(alts));
    }
    if (types.empty()) return Expr::call(j_.any_value_rule());
    std::vector<Expr> alts;
    for (const std::string& t : types) {
      FG_ASSIGN_OR_RETURN(Expr e, typed(s, t, path));
      alts.push_back(std::move(e));
    }
    return Expr::alt(std::move(alts));
  }

  Result<Expr> typed(const Json& s, const std::string& t, const std::string& path) {
    if (t == "null") return Expr::literal("null");
    if (t == "boolean") return Expr::alt({Expr::literal("true"), Expr::literal("false")});
    if (t == "integer" || t == "number") {
      std::optional<JsonPieces::Bound> lo, hi;
      FG_RETURN_IF_ERROR(bounds(s, path, lo, hi));
      return t == "integer" ? j_.integer(lo, hi) : j_.number(lo, hi);
    }
    if (t == "string") return string(s, path);
    if (t == "object") {
      FG_ASSIGN_OR_RETURN(int32_t id, object(s, path));
      return Expr::call(id);
    }
    FG_ASSIGN_OR_RETURN(int32_t id, array(s, path));
    return Expr::call(id);
  }

  Status bounds(const Json& s, const std::string& path, std::optional<JsonPieces::Bound>& lo,
                std::optional<JsonPieces::Bound>& hi) {
    auto number_at = [&](const char* k, double& out) -> Status {
      if (!s[k].is_number())
        return invalid_argument(std::string("JSON Schema '") + k + "' at " + path + " is not a number");
      out = s[k].get<double>();
      return Status::ok();
    };
    auto tighten = [](std::optional<JsonPieces::Bound>& b, JsonPieces::Bound nb, bool lower) {
      if (!b || (lower ? (nb.value > b->value || (nb.value == b->value && nb.exclusive))
                       : (nb.value < b->value || (nb.value == b->value && nb.exclusive))))
        b = nb;
    };
    double v = 0;
    // Draft 4: exclusiveMinimum/Maximum are booleans modifying minimum/maximum.
    const bool excl_min_flag =
        s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_boolean() && s["exclusiveMinimum"].get<bool>();
    const bool excl_max_flag =
        s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_boolean() && s["exclusiveMaximum"].get<bool>();
    if (s.contains("minimum")) {
      FG_RETURN_IF_ERROR(number_at("minimum", v));
      tighten(lo, {v, excl_min_flag, excl_min_flag ? "exclusiveMinimum" : "minimum"}, true);
    }
    if (s.contains("maximum")) {
      FG_RETURN_IF_ERROR(number_at("maximum", v));
      tighten(hi, {v, excl_max_flag, excl_max_flag ? "exclusiveMaximum" : "maximum"}, false);
    }
    if (s.contains("exclusiveMinimum") && !s["exclusiveMinimum"].is_boolean()) {
      FG_RETURN_IF_ERROR(number_at("exclusiveMinimum", v));
      tighten(lo, {v, true, "exclusiveMinimum"}, true);
    }
    if (s.contains("exclusiveMaximum") && !s["exclusiveMaximum"].is_boolean()) {
      FG_RETURN_IF_ERROR(number_at("exclusiveMaximum", v));
      tighten(hi, {v, true, "exclusiveMaximum"}, false);
    }
    return Status::ok();
  }

  Result<int> count_at(const Json& s, const char* k, const std::string& path, int fallback) {
    if (!s.contains(k)) return fallback;
    if (!s[k].is_number_integer() && !(s[k].is_number() && std::floor(s[k].get<double>()) == s[k].get<double>()))
      return invalid_argument(std::string("JSON Schema '") + k + "' at " + path + " is not an integer");
    const double v = s[k].get<double>();
    if (v < 0) return invalid_argument(std::string("JSON Schema '") + k + "' at " + path + " is negative");
    if (v > kMaxCount)
      return unsupported_keyword(k, path, "values above " + std::to_string(kMaxCount) + " are not supported");
    return int(v);
  }

  Result<Expr> string(const Json& s, const std::string& path) {
    FG_ASSIGN_OR_RETURN(int min_len, count_at(s, "minLength", path, 0));
    FG_ASSIGN_OR_RETURN(int max_len, count_at(s, "maxLength", path, -1));
    if (max_len >= 0 && max_len < min_len)
      return invalid_argument("JSON Schema at " + path + ": maxLength < minLength");
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("pattern")) {
      if (lengths)
        return unsupported_keyword(s.contains("minLength") ? "minLength" : "maxLength", path, "with 'pattern'");
      if (s.contains("format")) return unsupported_keyword("format", path, "with 'pattern'");
      if (!s["pattern"].is_string()) return invalid_argument("JSON Schema pattern at " + path + " is not a string");
      RegexOptions ro;
      ro.search = true;
      ro.json_string = true;
      auto e = regex_expr(s["pattern"].get<std::string>(), ro);
      if (!e.is_ok()) return Status(e.status().code(), "JSON Schema pattern at " + path + ": " + e.status().message());
      const Expr q = Expr::literal("\"");
      return Expr::seq({q, *e, q});
    }
    if (s.contains("format")) {
      if (lengths)
        return unsupported_keyword(s.contains("minLength") ? "minLength" : "maxLength", path, "with 'format'");
      if (!s["format"].is_string()) return invalid_argument("JSON Schema format at " + path + " is not a string");
      auto e = j_.format(s["format"].get<std::string>());
      if (!e.is_ok()) return Status(e.status().code(), e.status().message() + " at " + path);
      return e;
    }
    return j_.string(min_len, max_len);
  }

  Result<int32_t> object(const Json& s, const std::string& path) {
    struct Member {
      std::string key;
      const Json* schema;
      bool required;
      std::string path;
    };
    static const Json kAny = true;
    std::vector<Member> members;
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return invalid_argument("JSON Schema required at " + path + " is not a list");
      for (const Json& r : s["required"]) {
        if (!r.is_string()) return invalid_argument("JSON Schema required at " + path + " holds a non-string");
        required.insert(r.get<std::string>());
      }
    }
    const bool has_props = s.contains("properties");
    if (has_props) {
      if (!s["properties"].is_object())
        return invalid_argument("JSON Schema properties at " + path + " is not an object");
      for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it)
        members.push_back(
            {it.key(), &*it, required.count(it.key()) > 0, path + "/properties/" + escape_pointer(it.key())});
    }
    // additionalProperties: null = none, else the schema of other properties.
    const Json* additional = nullptr;
    if (s.contains("additionalProperties")) {
      const Json& a = s["additionalProperties"];
      if (!(a.is_boolean() && !a.get<bool>())) additional = &a;
    } else if (!has_props || !o_.strict_properties) {
      additional = &kAny;
    }
    for (const std::string& r : required) {
      if (std::any_of(members.begin(), members.end(), [&](const Member& m) { return m.key == r; })) continue;
      if (additional == nullptr)
        return invalid_argument("JSON Schema at " + path + " requires '" + r + "' but allows no such property");
      members.push_back({r, additional, true, path + "/additionalProperties"});
    }

    const int32_t id = b_.add_rule(path + " object");
    RuleGraph g;
    const size_t n = members.size();
    // Grid state (i, e): members before i decided, e = whether one was written (a comma is due).
    std::vector<std::array<int32_t, 2>> grid(n + 1);
    for (auto& row : grid) row = {g.add_state(), g.add_state()};
    g.connect(0, grid[0][0], j_.punct('{'));
    std::vector<std::string> keys;
    for (size_t i = 0; i < n; ++i) {
      const Member& m = members[i];
      keys.push_back(m.key);
      FG_ASSIGN_OR_RETURN(int32_t v, rule_for(*m.schema, m.path));
      const Expr pair = Expr::seq({Expr::literal(nlohmann::json(m.key).dump()), j_.punct(':'), Expr::call(v)});
      g.connect(grid[i][0], grid[i + 1][1], pair);
      g.connect(grid[i][1], grid[i + 1][1], Expr::seq({j_.punct(','), pair}));
      if (!m.required) {
        g.connect(grid[i][0], grid[i + 1][0], Expr::empty());
        g.connect(grid[i][1], grid[i + 1][1], Expr::empty());
      }
    }
    if (additional != nullptr) {
      FG_ASSIGN_OR_RETURN(int32_t v, rule_for(*additional, path + "/additionalProperties"));
      const Expr pair = Expr::seq({j_.string_except(keys), j_.punct(':'), Expr::call(v)});
      g.connect(grid[n][0], grid[n][1], pair);
      g.connect(grid[n][1], grid[n][1], Expr::seq({j_.punct(','), pair}));
    }
    const int32_t end = g.add_state();
    g.connect(grid[n][0], end, j_.punct('}'));
    g.connect(grid[n][1], end, j_.punct('}'));
    g.set_accepting(end);
    b_.set_body(id, std::move(g));
    return id;
  }

  Result<int32_t> array(const Json& s, const std::string& path) {
    static const Json kAny = true;
    std::vector<std::pair<const Json*, std::string>> prefix;
    const Json* rest = &kAny;  // null: no items past the prefix
    std::string rest_path = path + "/items";
    auto schema_or_none = [](const Json& x) -> const Json* { return x.is_boolean() && !x.get<bool>() ? nullptr : &x; };
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array())
        return invalid_argument("JSON Schema prefixItems at " + path + " is not a list");
      for (size_t i = 0; i < s["prefixItems"].size(); ++i)
        prefix.emplace_back(&s["prefixItems"][i], path + "/prefixItems/" + std::to_string(i));
      if (s.contains("items")) rest = schema_or_none(s["items"]);
    } else if (s.contains("items") && s["items"].is_array()) {
      for (size_t i = 0; i < s["items"].size(); ++i)
        prefix.emplace_back(&s["items"][i], path + "/items/" + std::to_string(i));
      rest_path = path + "/additionalItems";
      if (s.contains("additionalItems")) rest = schema_or_none(s["additionalItems"]);
    } else if (s.contains("items")) {
      rest = schema_or_none(s["items"]);
    }
    FG_ASSIGN_OR_RETURN(int min_items, count_at(s, "minItems", path, 0));
    FG_ASSIGN_OR_RETURN(int max_items, count_at(s, "maxItems", path, -1));
    const int k = int(prefix.size());
    if (rest == nullptr && (max_items < 0 || max_items > k)) max_items = k;
    if (max_items >= 0 && max_items < min_items)
      return invalid_argument("JSON Schema at " + path +
                              " admits no array (maxItems < minItems, or too few items allowed)");

    const int32_t id = b_.add_rule(path + " array");
    RuleGraph g;
    // Node j: j items written. Items before `mandatory` get rules of their own (one return node
    // each); later ones share one rule.
    const int mandatory = std::max(k, min_items);
    const int chain = max_items >= 0 ? max_items : mandatory + 1;
    std::vector<int32_t> nodes;
    for (int j = 0; j <= chain; ++j) nodes.push_back(g.add_state());
    g.connect(0, nodes[0], j_.punct('['));
    int32_t rest_rule = -1;
    for (int j = 0; j < chain; ++j) {
      int32_t item = -1;
      if (j < k) {
        FG_ASSIGN_OR_RETURN(item, rule_for(*prefix[size_t(j)].first, prefix[size_t(j)].second));
      } else if (j < mandatory && mandatory - k <= 4) {
        FG_ASSIGN_OR_RETURN(item, rule_for(*rest, rest_path));
      } else {
        if (rest_rule < 0) {
          FG_ASSIGN_OR_RETURN(rest_rule, rule_for(*rest, rest_path));
        }
        item = rest_rule;
      }
      g.connect(nodes[size_t(j)], nodes[size_t(j + 1)],
                j == 0 ? Expr::call(item) : Expr::seq({j_.punct(','), Expr::call(item)}));
    }
    if (max_items < 0) {
      if (rest_rule < 0) {
        FG_ASSIGN_OR_RETURN(rest_rule, rule_for(*rest, rest_path));
      }
      g.connect(nodes[size_t(chain)], nodes[size_t(chain)], Expr::seq({j_.punct(','), Expr::call(rest_rule)}));
    }
    const int32_t end = g.add_state();
    for (int j = min_items; j <= chain; ++j) g.connect(nodes[size_t(j)], end, j_.punct(']'));
    g.set_accepting(end);
    b_.set_body(id, std::move(g));
    if (b_.over_limit()) return invalid_argument("JSON Schema too large: its grammar passes the size limit at " + path);
    return id;
  }

  static constexpr int kMaxCount = 10000;

  GrammarBuilder& b_;
  JsonPieces& j_;
  const Json& root_;
  const JsonSchemaOptions& o_;
  std::map<std::string, int32_t> active_;  // $refs being compiled: their rules (recursion)
};

}  // namespace

Result<int32_t> add_json_schema_rule(GrammarBuilder& builder, JsonPieces& pieces, const Json& schema,
                                     const JsonSchemaOptions& options, const std::string& name) {
  const int32_t id = builder.add_rule(name);
  SchemaCompiler c(builder, pieces, schema, options);
  FG_RETURN_IF_ERROR(c.define_root(id));
  return id;
}

Result<Grammar> compile_json_schema(const Json& schema, const JsonSchemaOptions& options) {
  GrammarBuilder b(options.limits);
  JsonPieces pieces(b, options.whitespace);
  FG_ASSIGN_OR_RETURN(int32_t root, add_json_schema_rule(b, pieces, schema, options, "root"));
  return b.build(root);
}

Result<Grammar> compile_json_schema(std::string_view text, const JsonSchemaOptions& options) {
  Json schema;
  try {
    schema = Json::parse(text);
  } catch (const std::exception& e) {
    return invalid_argument(std::string("JSON Schema is not valid JSON: ") + e.what());
  }
  return compile_json_schema(schema, options);
}

Result<Grammar> json_object_grammar(const JsonSchemaOptions& options) {
  GrammarBuilder b(options.limits);
  JsonPieces pieces(b, options.whitespace);
  const int32_t root = b.add_rule("json_object", pieces.any_object());
  return b.build(root);
}

}  // namespace fg::grammar
