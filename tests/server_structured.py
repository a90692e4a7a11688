#!/usr/bin/env python3
"""Structured output of `deltafin serve` (response_format json_object / json_schema, decoded
under a token mask from coordinator/generate/json_grammar.h) on the demo model: 50 sampled
generations at temperature 1 against 5 schemas (objects with bounded strings and integers, an
enum array, optional keys and a number, anyOf, $ref) all finish by
themselves (finish_reason "stop") and validate (python3-jsonschema's Draft 2020-12 validator),
and json_object ones that stop are objects;
the same seed gives the same document alone and with 7 other requests in the batch;
unsupported keywords are a 400 naming them; hostile shapes (deep nesting, long names, a stop
string, tool parameters that are not an object); the scheduler's busy time per generated token
with and without a schema is printed (the mask alone is timed by test_json_grammar).

usage: server_structured.py DELTAFIN MODEL_DIR
"""
import concurrent.futures
import json
import os
import sys
import time

import jsonschema

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_util import Server, check, finish, metrics, post  # noqa: E402

EXE, MODEL = sys.argv[1:3]

SCHEMAS = [
    {"type": "object",
     "properties": {"name": {"type": "string", "maxLength": 16},
                    "age": {"type": "integer", "minimum": 0, "maximum": 120}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 4},
    {"type": "object",
     "properties": {"ok": {"type": "boolean"}, "score": {"type": "number"},
                    "tags": {"type": "array", "items": {"type": "string", "maxLength": 8},
                             "maxItems": 3}},
     "required": ["ok", "tags"]},
    {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 9},
               {"type": "object", "properties": {"k": {"const": "v"}, "n": {"type": "null"}},
                "required": ["k"]}]},
    {"$defs": {"pt": {"type": "object",
                      "properties": {"x": {"type": "integer", "minimum": -50, "maximum": 50},
                                     "y": {"type": "integer", "minimum": -50, "maximum": 50}},
                      "required": ["x", "y"]}},
     "type": "object", "properties": {"from": {"$ref": "#/$defs/pt"}, "to": {"$ref": "#/$defs/pt"}},
     "required": ["from", "to"]},
]
PROMPTS = ["Describe a person.", "Pick some colours.", "Rate this film.", "Give me a number.",
           "Draw a line."]


def ask(port, i, seed, schema=None, prompt=None):
    fmt = ({"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema}}
           if schema is not None else {"type": "json_object"})
    body = {"model": "m", "messages": [{"role": "user", "content": prompt or PROMPTS[i % 5]}],
            "temperature": 1.0, "seed": seed, "max_tokens": 300, "response_format": fmt}
    st, _, r = post(port, "/v1/chat/completions", body)
    return st, r


def main():
    srv = Server(EXE, MODEL, "--model-name", "m", "--no-draft", "--parallel", "8")
    pool = concurrent.futures.ThreadPoolExecutor(8)
    try:
        bad = []
        n = 0
        for i, schema in enumerate(SCHEMAS):
            jobs = [pool.submit(ask, srv.port, i, 100 * i + k, schema) for k in range(10)]
            for k, f in enumerate(jobs):
                st, r = f.result()
                n += 1
                if st != 200:
                    bad.append((i, k, st, r))
                    continue
                c = r["choices"][0]
                try:
                    doc = json.loads(c["message"]["content"])
                    jsonschema.Draft202012Validator(schema).validate(doc)
                    ok = c["finish_reason"] == "stop"
                except (ValueError, jsonschema.ValidationError) as e:
                    ok = False
                    c["why"] = str(e)[:200]
                if not ok:
                    bad.append((i, k, c))
        check(not bad and n == 50, f"50 sampled json_schema generations (5 schemas, temperature 1) "
              f"finish and validate{'' if not bad else ': ' + json.dumps(bad[:3])[:1500]}")
        # json_object has unbounded strings: a sampled one may run into max_tokens ("length");
        # every one that stops by itself is a JSON object
        # (sent together: seeded sampling gives the same documents batched, checked below)
        objs = [f.result() for f in [pool.submit(ask, srv.port, 0, 7 + k) for k in range(5)]]
        stopped = [r for st, r in objs if st == 200 and r["choices"][0]["finish_reason"] == "stop"]
        okobj = (all(st == 200 for st, _ in objs) and len(stopped) >= 2 and
                 all(isinstance(json.loads(r["choices"][0]["message"]["content"]), dict) for r in stopped))
        check(okobj, f"json_object: the sampled generations that stop ({len(stopped)} of 5) are JSON objects")

        # the same seed alone and batched with 7 others
        alone = ask(srv.port, 2, 4242, SCHEMAS[2])[1]["choices"][0]["message"]["content"]
        jobs = [pool.submit(ask, srv.port, 2, 4242 if k == 3 else 9000 + k, SCHEMAS[2]) for k in range(8)]
        batched = jobs[3].result()[1]["choices"][0]["message"]["content"]
        for f in jobs:
            f.result()
        check(alone == batched, "a seeded structured request gives the same document alone and batched")

        # errors
        for schema, kw in [({"type": "string", "pattern": "a+"}, "pattern"),
                           ({"type": "object", "patternProperties": {}}, "patternProperties"),
                           ({"type": "string", "format": "email"}, "format")]:
            st, r = ask(srv.port, 0, 1, schema)
            check(st == 400 and kw in r["error"]["message"] and
                  r["error"]["param"] == "response_format.json_schema.schema",
                  f"unsupported keyword '{kw}': 400 naming it ({r['error']['message'] if st == 400 else st})")

        # hostile shapes: deep nesting and long names (their JSON pointers outgrow any fixed
        # buffer), nesting past the limit, a stop string that would cut the document
        def rf(schema, **kw):
            b = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 40,
                 "temperature": 0, "response_format": {"type": "json_schema",
                                                       "json_schema": {"name": "t", "schema": schema}}}
            b.update(kw)
            return post(srv.port, "/v1/chat/completions", b)

        def nest(depth, name="a", leaf=None):
            d = leaf or {"type": "integer", "minimum": 0, "maximum": 9}
            for _ in range(depth):
                d = {"type": "object", "properties": {name: d}, "required": [name]}
            return d
        st63 = rf(nest(60), max_tokens=400)[0]
        st_long = rf(nest(6, "k" * 1000), max_tokens=1)[0]
        st70, _, r70 = rf(nest(70))
        check(st63 == 200 and st_long == 200 and st70 == 400 and "deeper than 64" in r70["error"]["message"],
              f"60 nested objects and 1000-character names at 6 levels are served ({st63}, {st_long}); "
              f"70 levels are a 400 ({st70})")
        st, _, r = rf({"type": "object", "properties": {"a": {"type": "string", "maxLength": 5}},
                       "required": ["a"]}, stop=":")
        doc = r["choices"][0]["message"]["content"] if st == 200 else ""
        try:
            ok = json.loads(doc).keys() == {"a"}
        except ValueError:
            ok = False
        check(ok, f"a stop string does not cut a constrained document ({doc!r})")
        tool = {"type": "function", "function": {"name": "get", "parameters": {}}}
        st, _, r = post(srv.port, "/v1/chat/completions",
                        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 60,
                         "temperature": 0, "tools": [tool], "tool_choice": "required"})
        calls = r["choices"][0]["message"].get("tool_calls") if st == 200 else None
        check(calls and json.loads(calls[0]["function"]["arguments"]) == {},
              f"a forced call of a tool with parameters {{}} has an object of arguments ({calls})")
        tool["function"]["parameters"] = {"type": "string"}
        st, _, r = post(srv.port, "/v1/chat/completions",
                        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 60,
                         "tools": [tool], "tool_choice": "required"})
        check(st == 400 and r["error"]["param"] == "tools[0].function.parameters",
              "forcing a call of a tool whose parameters are not an object: 400")

        # the mask's cost: the scheduler's busy seconds per generated token, free text vs. a
        # schema (the same prompt; prefill is the same small part of both)
        def cost(schema):
            m0 = metrics(srv.port)
            for k in range(4):
                body = {"model": "m", "messages": [{"role": "user", "content": PROMPTS[2]}],
                        "temperature": 1.0, "seed": k, "max_tokens": 60}
                if schema is None:
                    body["ignore_eos"] = True
                else:
                    body["response_format"] = {"type": "json_schema",
                                               "json_schema": {"name": "c", "schema": schema}}
                post(srv.port, "/v1/chat/completions", body)
            m1 = metrics(srv.port)
            toks = m1["deltafin_completion_tokens_total"] - m0["deltafin_completion_tokens_total"]
            busy = m1["deltafin_step_seconds_total"] - m0["deltafin_step_seconds_total"]
            return busy / max(toks, 1) * 1000, toks
        free_ms, nf = cost(None)
        mask_ms, nm = cost(SCHEMAS[2])
        print(f"info  scheduler busy ms per generated token: free text {free_ms:.2f} ({nf:.0f} "
              f"tokens), json_schema {mask_ms:.2f} ({nm:.0f} tokens), one run each on whatever "
              f"else this machine runs; the mask alone: test_json_grammar's timing lines")
    finally:
        srv.stop()
    finish()


if __name__ == "__main__":
    main()
