#!/usr/bin/env python3
"""Writes ../fixtures/views.jsonl, the example-router conformance table, and
../fixtures/effects.jsonl, its effects table: fixtures of `foldhost plugin
test` (docs/plugins.md, "Fixtures"), one per case.

Edit the cases here and rerun (python3 gen_conformance.py); the fixtures are
what the tests run through every build (cmd/foldhost, TestRouterFixtures:
`foldhost plugin test` on each build, in the fixtures' batches and in
batches of one) and what check.mjs reads. Every expectation is written out
by hand from SPEC.md, not computed by a plugin (so never regenerate these
with --update: fixtures/queries.jsonl is hand-written too).

Case format: {name, batches: [[{op, key, value?}]], want_views: {key: value},
want_rejected: N}. want_views is the complete view after all batches,
starting from an empty fold; want_rejected is summed over all batches. A
case is a fixture whose batches check nothing but the last, which checks the
views and the rejected updates (or, for an effect case, the effects of every
batch).

Where SPEC.md leaves JSON edges open, the table pins the strict reading
every build implements:
- known field names (upstreams, addr, weight) match exactly: case-sensitive,
  and a name written with escapes ("up\u0073treams") never matches (it is
  an unknown field, skipped);
- a repeated known field is malformed (unknown ones may repeat);
- null for a known field is malformed (weight: null is not "absent");
- unknown values nest at most 64 deep (a top-level member's value is at
  depth 1, an upstream object's member values at depth 2);
- JSON strings are not checked for valid UTF-8 (no case covers invalid UTF-8
  in an addr).
"""
import json
import os

cases = []


def put(key, value):
    return {"op": "put", "key": key, "value": value}


def delete(key):
    return {"op": "delete", "key": key}


def purge(key):
    return {"op": "purge", "key": key}


def ups(*pairs, extra=""):
    """A route value from (addr, weight-or-None) pairs."""
    items = []
    for a, w in pairs:
        if w is None:
            items.append('{"addr":"%s"}' % a)
        else:
            items.append('{"addr":"%s","weight":%s}' % (a, w))
    return '{"upstreams":[%s]%s}' % (",".join(items), extra)


def views(host, entry, addrs):
    v = {"host/" + host: entry}
    for a in addrs:
        v["upstream/%s/%s" % (a, host)] = ""
    return v


def case(name, batches, want_views, want_rejected=0):
    cases.append({"name": name, "batches": batches, "want_views": want_views,
                  "want_rejected": want_rejected})


# ---- valid entries ----

case("spec example",
     [[put("route.api.example.com",
           '{"upstreams":[{"addr":"10.0.0.1:8080","weight":3},{"addr":"10.0.0.2:8080"}], "comment":"ignored"}')]],
     views("api.example.com", "10.0.0.1:8080=3,10.0.0.2:8080=1", ["10.0.0.1:8080", "10.0.0.2:8080"]))

case("weight bounds and default",
     [[put("route.w", ups(("a:1", 1), ("b:2", 1000), ("c:3", 999), ("d:4", 10), ("e:5", None)))]],
     views("w", "a:1=1,b:2=1000,c:3=999,d:4=10,e:5=1", ["a:1", "b:2", "c:3", "d:4", "e:5"]))

case("whitespace everywhere",
     [[put("route.ws", ' \t\r\n{ "upstreams" :\n[ { "addr" : "a:1" , "weight" : 2 } ,\t{"addr":"b:2"} ] } \n')]],
     views("ws", "a:1=2,b:2=1", ["a:1", "b:2"]))

case("unknown fields at every level are skipped",
     [[put("route.u",
           '{"meta":{"a":[1,2,{"b":"x\\"y\\\\z\\u00e9\\n\\/"}],"c":null,"d":true,"e":false,"f":-1.5e-3,"g":0,"h":1E+2,"i":[]},'
           '"upstreams":[{"note":"he said \\"hi\\"","addr":"10.0.0.9:80","weight":7,"extra":[[],{},[{}]],"n":-0.0e1}],'
           '"z":"\\/","empty":{}}')]],
     views("u", "10.0.0.9:80=7", ["10.0.0.9:80"]))

case("escaped quotes and brackets inside ignored strings",
     [[put("route.s", '{"comment":"a \\"quoted\\" } ] , : string","upstreams":[{"x":"\\\\","addr":"a:1","y":"]}\\""}],"tail":"ends with backslash \\\\"}')]],
     views("s", "a:1=1", ["a:1"]))

# Unknown values nest at most 64 deep: a top-level member's value is at depth
# 1, an upstream object's member values at depth 2, each container adds one.
def nest(k, inner=""):
    return "[" * k + inner + "]" * k


case("nesting up to the depth limit in ignored fields",
     [[put("route.deep1", '{"junk":%s,"upstreams":[{"addr":"a:1"}]}' % nest(64)),
       put("route.deep2", '{"junk":%s,"upstreams":[{"addr":"a:1"}]}' % nest(63, "1")),
       put("route.deep3", '{"upstreams":[{"addr":"a:1","junk":%s}]}' % nest(63)),
       put("route.deep4", '{"junk":%s,"upstreams":[{"addr":"a:1"}]}' % ('{"k":' * 63 + "{}" + "}" * 63)),
       put("route.deep5", '{"junk":%s,"upstreams":[{"addr":"a:1"}]}' % ('[{"k":' * 31 + "[]" + "}]" * 31))]],
     {**views("deep1", "a:1=1", ["a:1"]), **views("deep2", "a:1=1", ["a:1"]),
      **views("deep3", "a:1=1", ["a:1"]), **views("deep4", "a:1=1", ["a:1"]),
      **views("deep5", "a:1=1", ["a:1"])})

case("nesting beyond the depth limit is malformed",
     [[put("route.deep1", '{"junk":%s,"upstreams":[{"addr":"a:1"}]}' % nest(65)),
       put("route.deep2", '{"junk":%s,"upstreams":[{"addr":"a:1"}]}' % nest(64, "1")),
       put("route.deep3", '{"upstreams":[{"addr":"a:1","junk":%s}]}' % nest(64)),
       put("route.deep4", '{"junk":%s,"upstreams":[{"addr":"a:1"}]}' % ('{"k":' * 64 + "{}" + "}" * 64)),
       put("route.deep5", '{"junk":%s,"upstreams":[{"addr":"a:1"}]}' % nest(1000))]],
     {}, 5)

case("escaped field names never match a known field",
     [[put("route.e1", '{"up\\u0073treams":[{"addr":"a:1"}]}'),
       put("route.e2", '{"upstreams":[{"\\u0061ddr":"a:1"}]}'),
       put("route.e3", '{"upstreams":[{"addr":"a:1","w\\u0065ight":5}]}'),
       put("route.e4", '{"upstreams":[{"addr":"a:1"}],"up\\u0073treams":"ignored"}')]],
     {**views("e3", "a:1=1", ["a:1"]), **views("e4", "a:1=1", ["a:1"])}, 2)

case("repeated known fields are malformed",
     [[put("route.r1", '{"upstreams":[{"addr":"a:1"}],"upstreams":[{"addr":"a:1"}]}'),
       put("route.r2", '{"upstreams":[{"addr":"a:1","addr":"a:1"}]}'),
       put("route.r3", '{"upstreams":[{"addr":"a:1","weight":2,"weight":2}]}'),
       put("route.r4", '{"upstreams":[{"addr":"a:1","other":1,"other":2}],"x":1,"x":2}')]],
     views("r4", "a:1=1", ["a:1"]), 3)

case("null for a known field is malformed",
     [[put("route.n1", '{"upstreams":null}'),
       put("route.n2", '{"upstreams":[{"addr":null}]}'),
       put("route.n3", '{"upstreams":[{"addr":"a:1","weight":null}]}'),
       put("route.n4", '{"upstreams":[{"addr":"a:1","other":null}],"x":null}')]],
     views("n4", "a:1=1", ["a:1"]), 3)

case("field names are case-sensitive",
     [[put("route.c1", '{"Upstreams":[{"addr":"a:1"}]}'),
       put("route.c2", '{"upstreams":[{"Addr":"a:1"}]}'),
       put("route.c3", '{"upstreams":[{"addr":"a:1","Weight":9}]}')]],
     views("c3", "a:1=1", ["a:1"]), 2)

case("addr of 255 bytes and non-ASCII addr",
     [[put("route.long", ups(("x" * 255, 4))),
       put("route.utf8", ups(("\u00fcn\u00efcode.example:80", None)))]],
     {**views("long", "x" * 255 + "=4", ["x" * 255]),
      **views("utf8", "\u00fcn\u00efcode.example:80=1", ["\u00fcn\u00efcode.example:80"])})

case("64 upstreams",
     [[put("route.many", ups(*[("10.0.0.%d:80" % i, None) for i in range(64)]))]],
     views("many", ",".join("10.0.0.%d:80=1" % i for i in range(64)), ["10.0.0.%d:80" % i for i in range(64)]))

case("host with slashes and dots",
     [[put("route.a/b.example", ups(("x:1", None)))]],
     views("a/b.example", "x:1=1", ["x:1"]))

case("duplicate addrs are kept in the entry, indexed once",
     [[put("route.d", ups(("a:1", 2), ("b:1", None), ("a:1", 5)))]],
     views("d", "a:1=2,b:1=1,a:1=5", ["a:1", "b:1"]))

# ---- rejected updates ----

bad_weights = ["0", "1001", "-1", "1.0", "1e2", "1E2", '"3"', "true", "01", "1.5",
               "99999999999999999999", "-0", "[1]", "{}", "+1", "1.", ".5"]
case("weight out of range or not a plain integer",
     [[put("route.w%d" % i, '{"upstreams":[{"addr":"a:1","weight":%s}]}' % w) for i, w in enumerate(bad_weights)]],
     {}, len(bad_weights))

bad_addrs = ['""', '"a,b"', '"a=b"', '"a/b"', '"a\\"b"', '"\\u0041:80"', '"a\\\\b"', '"a\\/b"',
             '"%s"' % ("x" * 256), '"a\tb"', "80", "[]", "{}", "true", "null"]
case("bad addr values",
     [[put("route.a%d" % i, '{"upstreams":[{"addr":%s}]}' % a) for i, a in enumerate(bad_addrs)] +
      [put("route.noaddr", '{"upstreams":[{"weight":2}]}'),
       put("route.emptyobj", '{"upstreams":[{}]}')]],
     {}, len(bad_addrs) + 2)

bad_values = [
    "",                                        # empty
    "   ",                                     # whitespace only
    "null",
    "[]",
    '"upstreams"',
    "{}",                                      # no upstreams
    '{"upstreams":null}',
    '{"upstreams":[]}',
    '{"upstreams":{}}',
    '{"upstreams":"a:1"}',
    '{"upstreams":[1]}',
    '{"upstreams":[null]}',
    '{"upstreams":["a:1"]}',
    '{"upstreams":[[{"addr":"a:1"}]]}',
    '{"upstreams":[{"addr":"a:1"}]} x',        # trailing garbage
    '{"upstreams":[{"addr":"a:1"}]}{}',        # two values
    '{"upstreams":[{"addr":"a:1"}],}',         # trailing comma
    '{"upstreams":[{"addr":"a:1"},]}',
    '{"upstreams":[{"addr":"a:1",}]}',
    '{"upstreams":[{"addr":"a:1"}]',           # truncated
    "{'upstreams':[{'addr':'a:1'}]}",          # single quotes
    '{upstreams:[{"addr":"a:1"}]}',            # bare name
    '{"upstreams":[{"addr":"a:1"}],"c":"\\x"}',    # bad escape in an ignored string
    '{"upstreams":[{"addr":"a:1"}],"c":"\\u12"}',  # short \u escape
    '{"upstreams":[{"addr":"a:1"}],"c":"a\nb"}',   # raw control character
    '{"upstreams":[{"addr":"a:1"}],"c":tru}',
    '{"upstreams":[{"addr":"a:1"}],"c":nul}',
    '{"upstreams":[{"addr":"a:1"}],"c":-}',
    '{"upstreams":[{"addr":"a:1"}],"c":01}',
    '{"upstreams":[{"addr":"a:1"}],"c":[1 2]}',
    '{"upstreams":[{"addr":"a:1"}],"c":{"k" 1}}',
    '{"upstreams":[{"addr":"a:1"}],"c":{"k":1,}}',
    '{"upstreams":[{"addr":"a:1"}],"c":[[[]]}',
    '{"upstreams":[{"addr":"a:1"}] "c":1}',    # missing comma
    '{"upstreams":[{"addr":"a:1"}],"c":"unterminated}',
]
case("malformed or rule-breaking JSON",
     [[put("route.m%d" % i, v) for i, v in enumerate(bad_values)]],
     {}, len(bad_values))

case("65 upstreams are too many",
     [[put("route.toomany", ups(*[("10.0.0.%d:80" % i, None) for i in range(65)]))]],
     {}, 1)

case("irrelevant keys",
     [[put("config.x", ups(("a:1", None))),
       put("route.", ups(("a:1", None))),
       put("route", ups(("a:1", None))),
       put("router.a", ups(("a:1", None))),
       put("ROUTE.a", ups(("a:1", None))),
       put("xroute.a", ups(("a:1", None))),
       delete("other.k"),
       delete("route."),
       purge("route."),
       purge("zzz")]],
     {}, 10)

case("a rejected put leaves the previous entry",
     [[put("route.keep", ups(("a:1", 2)))],
      [put("route.keep", '{"upstreams":[{"addr":"a/1"}]}')],
      [put("route.keep", "not json")]],
     views("keep", "a:1=2", ["a:1"]), 2)

# ---- updates, deletes, purges, the reverse index ----

case("update replaces the reverse index across batches",
     [[put("route.h", ups(("a:1", None), ("b:1", None)))],
      [put("route.h", ups(("b:1", 3), ("c:1", None)))]],
     views("h", "b:1=3,c:1=1", ["b:1", "c:1"]))

case("delete removes the entry and its reverse index",
     [[put("route.h", ups(("a:1", None), ("b:1", None))),
       put("route.other", ups(("a:1", None)))],
      [delete("route.h")]],
     views("other", "a:1=1", ["a:1"]))

case("purge removes the entry and its reverse index",
     [[put("route.h", ups(("a:1", None), ("b:1", None)))],
      [purge("route.h")]],
     {})

case("delete and purge of a host without an entry",
     [[delete("route.nobody"), purge("route.nobody2")]],
     {})

case("delete then put again across batches",
     [[put("route.h", ups(("a:1", None)))],
      [delete("route.h")],
      [put("route.h", ups(("b:1", None)))]],
     views("h", "b:1=1", ["b:1"]))

case("repeated identical put",
     [[put("route.h", ups(("a:1", None)))],
      [put("route.h", ups(("a:1", None)))]],
     views("h", "a:1=1", ["a:1"]))

case("updates within one batch see the batch's own writes",
     [[put("route.h", ups(("a:1", None), ("b:1", None))),
       put("route.h", ups(("b:1", None), ("c:1", None))),
       put("route.h2", ups(("c:1", None))),
       delete("route.h2"),
       put("route.h", ups(("d:1", 9)))]],
     views("h", "d:1=9", ["d:1"]))

case("committed entry changed several times in one batch",
     [[put("route.h", ups(("c:1", None), ("x:1", None)))],
      [put("route.h", ups(("a:1", None))),
       delete("route.h"),
       put("route.h", ups(("b:1", None), ("x:1", 2)))]],
     views("h", "b:1=1,x:1=2", ["b:1", "x:1"]))

case("delete then put in one batch after a committed entry",
     [[put("route.h", ups(("a:1", None), ("b:1", None)))],
      [delete("route.h"),
       put("route.h", ups(("b:1", None))),
       put("route.h", ups(("b:1", None), ("e:1", None)))]],
     views("h", "b:1=1,e:1=1", ["b:1", "e:1"]))

case("duplicate addrs across updates",
     [[put("route.d", ups(("a:1", 2), ("b:1", None), ("a:1", 5)))],
      [put("route.d", ups(("b:1", None), ("b:1", 4)))]],
     views("d", "b:1=1,b:1=4", ["b:1"]))

case("hosts sharing an upstream",
     [[put("route.h1", ups(("x:1", None))),
       put("route.h2", ups(("x:1", None), ("y:1", None))),
       put("route.h3", ups(("x:1", None)))],
      [delete("route.h2"),
       put("route.h3", ups(("y:1", None)))]],
     {**views("h1", "x:1=1", ["x:1"]), **views("h3", "y:1=1", ["y:1"])})

case("rejected updates mixed with valid ones in one batch",
     [[put("route.ok1", ups(("a:1", None))),
       put("route.bad", "{"),
       put("other", "x"),
       put("route.ok2", ups(("b:1", None))),
       delete("route.ok1"),
       put("route.ok1", '{"upstreams":[]}')]],
     views("ok2", "b:1=1", ["b:1"]), 3)

# ---- the effects table (SPEC.md, "Effects") ----
#
# Case format: {name, batches, want_effects: [{update, subject, headers:
# [[name, value]], payload}]}: every effect of every batch, in order,
# starting from an empty fold, each naming its update. Written out by hand
# from SPEC.md like want_views.

effect_cases = []


def changed_put(update, host, entry):
    """The effect of the case's update number update (from 1, across its
    batches), a put of host's entry."""
    return {"update": update, "subject": "route.changed", "headers": [["Route-Op", "put"]], "payload": host + "\n" + entry}


def changed_delete(update, host):
    return {"update": update, "subject": "route.changed", "headers": [["Route-Op", "delete"]], "payload": host + "\n"}


def effect_case(name, batches, want_effects):
    effect_cases.append({"name": name, "batches": batches, "want_effects": want_effects})


effect_case("a new host",
            [[put("route.api.example.com", ups(("10.0.0.1:8080", 3), ("10.0.0.2:8080", None)))]],
            [changed_put(1, "api.example.com", "10.0.0.1:8080=3,10.0.0.2:8080=1")])
effect_case("the same entry again, in a later batch: nothing",
            [[put("route.h", ups(("a:1", None)))], [put("route.h", ups(("a:1", None)))]],
            [changed_put(1, "h", "a:1=1")])
effect_case("the same entry again, in the same batch: nothing",
            [[put("route.h", ups(("a:1", None))), put("route.h", ups(("a:1", None)))]],
            [changed_put(1, "h", "a:1=1")])
effect_case("the same resolved entry written differently: nothing",
            [[put("route.h", ups(("a:1", None)))], [put("route.h", ' {"upstreams":[{"weight":1,"addr":"a:1"}],"x":[1]}')]],
            [changed_put(1, "h", "a:1=1")])
effect_case("a weight change",
            [[put("route.h", ups(("a:1", 2)))], [put("route.h", ups(("a:1", 3)))]],
            [changed_put(1, "h", "a:1=2"), changed_put(2, "h", "a:1=3")])
effect_case("delete and purge of hosts with entries",
            [[put("route.d", ups(("a:1", None))), put("route.p", ups(("b:1", None)))],
             [delete("route.d"), purge("route.p")]],
            [changed_put(1, "d", "a:1=1"), changed_put(2, "p", "b:1=1"), changed_delete(3, "d"), changed_delete(4, "p")])
effect_case("delete and purge of hosts without an entry: nothing",
            [[delete("route.none"), purge("route.none2")]],
            [])
effect_case("put, delete, put in one batch",
            [[put("route.h", ups(("a:1", None))), delete("route.h"), put("route.h", ups(("a:1", None)))]],
            [changed_put(1, "h", "a:1=1"), changed_delete(2, "h"), changed_put(3, "h", "a:1=1")])
effect_case("rejected updates emit nothing",
            [[put("route.bad", "{"), put("other", ups(("a:1", None))), put("route.", ups(("a:1", None))),
              put("route.ok", ups(("a:1", None))), put("route.ok", '{"upstreams":[]}')]],
            [changed_put(4, "ok", "a:1=1")])
effect_case("hosts in update order, across hosts",
            [[put("route.b", ups(("x:1", None))), put("route.a", ups(("y:1", None))), put("route.b", ups(("z:1", None)))]],
            [changed_put(1, "b", "x:1=1"), changed_put(2, "a", "y:1=1"), changed_put(3, "b", "z:1=1")])
effect_case("a host that is no run of subject tokens goes in the payload",
            [[put("route.a..b *>", ups(("a:1", None)))]],
            [changed_put(1, "a..b *>", "a:1=1")])



def line(obj):
    """One fixture line: compact JSON, text as it is."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def update_line(u):
    if u["op"] == "put":
        return line({"key": u["key"], "value": u["value"]})
    return line({"key": u["key"], "op": u["op"]})


def write_fixtures(name, header, cases, expectations):
    """Writes ../fixtures/<name>: each case a fixture whose last batch
    checks what expectations(case) says (its check list and lines)."""
    names = [c["name"] for c in cases]
    assert len(names) == len(set(names)), "duplicate case names in " + name
    lines = ["# " + l if l else "#" for l in header.strip().split("\n")]
    for c in cases:
        lines.append(line({"fixture": c["name"]}))
        n = len(c["batches"])
        for i, b in enumerate(c["batches"]):
            lines.extend(update_line(u) for u in b)
            if i < n - 1:
                lines.append(line({"batch": "%d of %d" % (i + 1, n), "check": []}))
            else:
                check, exp = expectations(c)
                lines.append(line({"batch": "%d of %d" % (i + 1, n), "check": check}))
                lines.extend(exp)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", name)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %d fixtures to %s" % (len(cases), os.path.normpath(out)))


def view_expectations(c):
    exp = [line({"view": k, "value": v}) for k, v in sorted(c["want_views"].items(), key=lambda kv: kv[0].encode())]
    if c["want_rejected"]:
        exp.append(line({"rejected": c["want_rejected"]}))
    return ["views", "rejected"], exp


def effect_expectations(c):
    exp = []
    for e in c["want_effects"]:
        exp.append(line({"effect": e["subject"], "update": e["update"], "headers": e["headers"], "payload": e["payload"]}))
    return ["effects"], exp


GENERATED = """
Generated by plugins/example-router/check/gen_conformance.py: edit it, not this.
The example router's %s table (SPEC.md), written by hand from the spec:
every build must fold each fixture to exactly this (cmd/foldhost,
TestRouterFixtures: 'foldhost plugin test' on every build).
"""

write_fixtures("views.jsonl", GENERATED % "conformance", cases, view_expectations)
write_fixtures("effects.jsonl", GENERATED % "effects", effect_cases, effect_expectations)
