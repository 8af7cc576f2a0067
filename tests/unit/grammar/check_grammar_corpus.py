#!/usr/bin/env python3
"""Validates flashgen's grammar outputs independently of flashgen.

Runs grammar_corpus_walk (random walks through every grammar of tests/fixtures/grammar with real
tokenizers) and checks each output that ended:
  json_schema  json.loads, then jsonschema's validator for the schema's draft with its format
               checker, plus format checks of our own where jsonschema's are lenient or absent;
  regex        Python re.fullmatch;
  gbnf         an Earley recognizer written here from the GBNF syntax (no code shared with
               flashgen's parser);
  tools        the calls parsed in the format's syntax, the tool allowed, its arguments validated
               against the tool's parameter schema by jsonschema.
Fails on any invalid output, any walker error (mask mismatch, compile failure), or a grammar whose
walks never ended.
"""
import argparse
import collections
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import jsonschema
from jsonschema import validators

# ---------------------------------------------------------------- formats

EMAIL = re.compile(r"^[A-Za-z0-9_%+.-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")
UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
DURATION = re.compile(r"^P(?!$)(\d+Y)?(\d+M)?(\d+W)?(\d+D)?(T(?=\d)(\d+H)?(\d+M)?(\d+S)?)?$")


def extra_format_errors(schema, instance, path="$"):
    """Format checks jsonschema leaves out (email only checks '@'; duration needs a package)."""
    errors = []
    if isinstance(schema, dict):
        fmt = schema.get("format")
        if isinstance(instance, str) and fmt:
            checks = {"email": EMAIL, "uuid": UUID, "duration": DURATION}
            if fmt in checks and not checks[fmt].match(instance):
                errors.append(f"{path}: {instance!r} is not a {fmt}")
        props = schema.get("properties", {})
        if isinstance(instance, dict):
            for k, v in instance.items():
                if k in props:
                    errors += extra_format_errors(props[k], v, f"{path}.{k}")
        items = schema.get("items")
        if isinstance(instance, list) and isinstance(items, dict):
            for i, v in enumerate(instance):
                errors += extra_format_errors(items, v, f"{path}[{i}]")
    return errors


def check_schema_output(schema, text):
    try:
        instance = json.loads(text)
    except json.JSONDecodeError as e:
        return [f"not JSON: {e}"]
    cls = validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(instance)]
    return errors + extra_format_errors(schema, instance)


# ---------------------------------------------------------------- GBNF recognizer


class GbnfError(Exception):
    pass


def parse_gbnf(text):
    """GBNF text -> {nonterminal: [alternative, ...]}, alternative = [symbol, ...], symbol =
    nonterminal name (str) or terminal (tuple of (lo, hi) code point ranges, negated flag)."""
    rules = {}
    counter = [0]
    pos = [0]

    def peek(k=0):
        return text[pos[0] + k] if pos[0] + k < len(text) else ""

    def skip(newlines=True):
        while pos[0] < len(text):
            c = text[pos[0]]
            if c == "#":
                while pos[0] < len(text) and text[pos[0]] != "\n":
                    pos[0] += 1
            elif c in " \t\r" or (newlines and c == "\n"):
                pos[0] += 1
            else:
                break

    def name():
        m = re.compile(r"[A-Za-z0-9_-]+").match(text, pos[0])
        if not m:
            raise GbnfError(f"name expected at {pos[0]}")
        pos[0] = m.end()
        return m.group(0)

    def rule_start():
        m = re.compile(r"[A-Za-z0-9_-]+\s*::=").match(text, pos[0])
        return m is not None

    def fresh(alts):
        counter[0] += 1
        n = f"__{counter[0]}"
        rules[n] = alts
        return n

    def char():
        c = peek()
        if c != "\\":
            pos[0] += 1
            return ord(c)
        e = peek(1)
        pos[0] += 2
        simple = {"n": 10, "r": 13, "t": 9, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45, "/": 47, "'": 39}
        if e in simple:
            return simple[e]
        n = {"x": 2, "u": 4, "U": 8}[e]
        v = int(text[pos[0]:pos[0] + n], 16)
        pos[0] += n
        return v

    def primary():
        c = peek()
        if c == '"':
            pos[0] += 1
            seq = []
            while peek() != '"':
                v = char()
                seq.append((((v, v),), False))
            pos[0] += 1
            return [seq]
        if c == "[":
            pos[0] += 1
            neg = peek() == "^"
            if neg:
                pos[0] += 1
            ranges = []
            while peek() != "]":
                lo = char()
                hi = lo
                if peek() == "-" and peek(1) != "]":
                    pos[0] += 1
                    hi = char()
                ranges.append((lo, hi))
            pos[0] += 1
            return [[(tuple(ranges), neg)]]
        if c == "(":
            pos[0] += 1
            alts = alternatives(True)
            if peek() != ")":
                raise GbnfError("')' expected")
            pos[0] += 1
            return alts
        if c == ".":
            pos[0] += 1
            return [[(((0, 0x10FFFF),), False)]]
        return [[name()]]

    def item():
        alts = primary()
        while True:
            c = peek()
            if c not in "*+?{" or c == "":
                return alts
            sym = fresh(alts)
            if c == "*":
                pos[0] += 1
                star = fresh(None)
                rules[star] = [[], [star, sym]]  # left recursion: linear for Earley
                alts = [[star]]
            elif c == "+":
                pos[0] += 1
                star = fresh(None)
                rules[star] = [[], [star, sym]]  # left recursion: linear for Earley
                alts = [[sym, star]]
            elif c == "?":
                pos[0] += 1
                alts = [[], [sym]]
            else:
                m = re.compile(r"\{\s*(\d+)\s*(,\s*(\d*)\s*)?\}").match(text, pos[0])
                pos[0] = m.end()
                lo = int(m.group(1))
                hi = lo if m.group(2) is None else (None if m.group(3) == "" else int(m.group(3)))
                seq = [sym] * lo
                if hi is None:
                    star = fresh(None)
                    rules[star] = [[], [star, sym]]  # left recursion: linear for Earley
                    seq.append(star)
                else:
                    for _ in range(hi - lo):
                        seq.append(fresh([[], [sym]]))
                alts = [seq]

    def sequence(nested):
        seq = []
        while True:
            skip()
            c = peek()
            if c == "" or c in "|)" or (not nested and rule_start()):
                return seq
            seq.append(fresh(item()))

    def alternatives(nested):
        alts = [sequence(nested)]
        while True:
            skip()
            if peek() == "|":
                pos[0] += 1
                alts.append(sequence(nested))
            else:
                return alts

    skip()
    while pos[0] < len(text):
        n = name()
        skip()
        if text[pos[0]:pos[0] + 3] != "::=":
            raise GbnfError("'::=' expected")
        pos[0] += 3
        rules[n] = alternatives(False)
        skip()
    return rules


def terminal_matches(sym, cp):
    ranges, neg = sym
    hit = any(lo <= cp <= hi for lo, hi in ranges)
    return hit != neg


def recognize(rules, start, text):
    """Earley recognition over code points, with the nullable-prediction fix."""
    nullable = set()
    changed = True
    while changed:
        changed = False
        for a, alts in rules.items():
            if a not in nullable and any(all(isinstance(s, str) and s in nullable for s in alt) for alt in alts):
                nullable.add(a)
                changed = True
    cps = [ord(c) for c in text]
    n = len(cps)
    sets = [dict() for _ in range(n + 1)]
    waiting = [collections.defaultdict(list) for _ in range(n + 1)]  # set -> symbol -> items expecting it

    for i in range(n + 1):
        agenda = []

        def add(item, i=i, agenda=agenda):
            if item not in sets[i]:
                sets[i][item] = None
                agenda.append(item)

        if i == 0:
            for k in range(len(rules[start])):
                add((start, k, 0, 0))
        else:
            agenda.extend(sets[i])
        j = 0
        while j < len(agenda):
            a, k, dot, origin = agenda[j]
            j += 1
            rhs = rules[a][k]
            if dot < len(rhs):
                sym = rhs[dot]
                if isinstance(sym, str):
                    waiting[i][sym].append((a, k, dot, origin))
                    for k2 in range(len(rules[sym])):
                        add((sym, k2, 0, i))
                    if sym in nullable:
                        add((a, k, dot + 1, origin))
                elif i < n and terminal_matches(sym, cps[i]):
                    item = (a, k, dot + 1, origin)
                    if item not in sets[i + 1]:
                        sets[i + 1][item] = None
            else:
                w = waiting[origin][a]
                m = 0
                while m < len(w):  # the list may grow while we walk it (origin == i)
                    b, k3, d3, o3 = w[m]
                    m += 1
                    add((b, k3, d3 + 1, o3))
    return any((start, k, len(rules[start][k]), 0) in sets[n] for k in range(len(rules[start])))


# ---------------------------------------------------------------- tool calls


def tool_call_errors(spec, text):
    """Parses the calls in the format's syntax and validates each call's arguments."""
    fmt = spec["format"]
    try:
        if fmt == "hermes":
            if not re.fullmatch(r"<tool_call>\n.*?\n</tool_call>(\n<tool_call>\n.*?\n</tool_call>)*", text, re.S):
                return ["not a sequence of <tool_call> blocks"]
            calls = [json.loads(b) for b in re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text, re.S)]
            args_key = "arguments"
        elif fmt == "llama3_json":
            calls, args_key = [json.loads(text)], "parameters"
        else:
            if not text.startswith("[TOOL_CALLS]"):
                return ["no [TOOL_CALLS] marker"]
            calls, args_key = json.loads(text[len("[TOOL_CALLS]"):]), "arguments"
    except json.JSONDecodeError as e:
        return [f"not JSON: {e}"]
    tools = {t.get("function", t)["name"]: t.get("function", t) for t in spec["tools"]}
    errors = []
    if not spec.get("parallel", True) and len(calls) != 1:
        errors.append(f"{len(calls)} calls without parallel_tool_calls")
    for c in calls:
        if set(c) != {"name", args_key}:
            errors.append(f"call keys {sorted(c)}")
            continue
        name = c["name"]
        if name not in tools or (spec.get("named") and name != spec["named"]):
            errors.append(f"tool {name!r} not allowed")
            continue
        params = tools[name].get("parameters", {"type": "object", "properties": {}, "additionalProperties": False})
        errors += [f"{name}: {e}" for e in check_schema_output(params, json.dumps(c[args_key]))]
    return errors


# ---------------------------------------------------------------- main


def self_test():
    """The checkers must reject what they exist to reject."""
    schema = {"type": "object", "properties": {"a": {"type": "integer", "maximum": 3}, "d": {"format": "date"},
                                               "e": {"format": "email"}}, "required": ["a"]}
    assert check_schema_output(schema, '{"a": 3}') == []
    assert check_schema_output(schema, '{"a": 4}')
    assert check_schema_output(schema, '{"a": 1, "d": "2023-02-29"}')
    assert check_schema_output(schema, '{"a": 1, "e": "no-at-sign"}')
    assert check_schema_output(schema, '{"a": 1,}')
    g = parse_gbnf('root ::= "(" root ")" | x{2,3}\nx ::= [a-c] # comment\n')
    assert recognize(g, "root", "((ab))") and recognize(g, "root", "abc")
    assert not recognize(g, "root", "((ab)") and not recognize(g, "root", "a") and not recognize(g, "root", "abcd")
    g = parse_gbnf('root ::= [^x]* "x"')
    assert recognize(g, "root", "ééx") and not recognize(g, "root", "xx")
    spec = {"format": "hermes", "parallel": False, "tools": [{"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}]}
    assert tool_call_errors(spec, '<tool_call>\n{"name": "f", "arguments": {"n": 1}}\n</tool_call>') == []
    assert tool_call_errors(spec, '<tool_call>\n{"name": "f", "arguments": {"n": "1"}}\n</tool_call>')
    assert tool_call_errors(spec, '<tool_call>\n{"name": "g", "arguments": {"n": 1}}\n</tool_call>')



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--walker", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--tokenizer", action="append", default=[], help="NAME=PATH (skipped when PATH is missing)")
    ap.add_argument("--walks", default="3")
    ap.add_argument("--check", default="0.05")
    ap.add_argument("--seed", default="1")
    args = ap.parse_args()
    self_test()
    corpus = Path(args.corpus)
    toks = [t for t in args.tokenizer if Path(t.split("=", 1)[1]).exists()]
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as out:
        cmd = [args.walker, "--corpus", str(corpus), "--walks", args.walks, "--check", args.check, "--seed", args.seed,
               "--out", out.name]
        for t in toks:
            cmd += ["--tokenizer", t]
        walker = subprocess.run(cmd)
        rows = [json.loads(line) for line in Path(out.name).read_text(encoding="utf-8").splitlines()]

    schemas = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in (corpus / "json_schema").glob("*.json")}
    regexes = [l for l in (corpus / "regex.txt").read_text(encoding="utf-8").splitlines() if l and not l.startswith("#")]
    gbnf = {p.stem: parse_gbnf(p.read_text(encoding="utf-8")) for p in (corpus / "gbnf").glob("*.gbnf")}
    tools = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in (corpus / "tools").glob("*.json")}

    failures = []
    ended = collections.Counter()
    walks = collections.Counter()
    checked = collections.Counter()
    for row in rows:
        key = (row["kind"], row["name"], row["tokenizer"])
        walks[key] += 1
        if "error" in row:
            failures.append(f"{key}: {row['error']}")
            continue
        if not row["ended"]:
            continue
        ended[key] += 1
        text = row["output"]
        if row["kind"] == "json_schema":
            errs = check_schema_output(schemas[row["name"]], text)
        elif row["kind"] == "regex":
            pattern = regexes[int(row["name"].split("_")[1])].replace("(?<", "(?P<")
            errs = [] if re.fullmatch(pattern, text) else [f"does not match /{pattern}/"]
        elif row["kind"] == "gbnf":
            errs = [] if recognize(gbnf[row["name"]], "root", text) else ["not in the grammar's language"]
        else:
            errs = tool_call_errors(tools[row["name"]], text)
        checked[row["kind"]] += 1
        if errs:
            failures.append(f"{key}: {text!r}: {'; '.join(errs)}")
    for key, n in walks.items():
        if ended[key] == 0:
            failures.append(f"{key}: none of {n} walks ended")
    total = sum(walks.values())
    print(f"grammar corpus: {len(schemas)} schemas, {len(regexes)} regexes, {len(gbnf)} GBNF grammars, "
          f"{len(tools)} tool sets; "
          f"tokenizers {', '.join(t.split('=')[0] for t in toks)}; {total} walks, {sum(ended.values())} ended, "
          f"validated {dict(checked)}")
    for f in failures[:40]:
        print("FAIL", f)
    if walker.returncode != 0 and not failures:
        failures.append(f"walker exited with {walker.returncode}")
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
