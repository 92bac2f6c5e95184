# SPDX-License-Identifier: Apache-2.0
"""docs/api.yaml, the OpenAPI 3.1 description of kosa8d's API, against the route table it
describes (src/daemon/api.c, `routes[]`): every route is in the document and every
documented operation is a route, with the same method; and the document holds together
(unique operationIds, every $ref resolves, every {parameter} of a path declared, every
operation answers something)."""
import os
import re

import yaml

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
API_C = os.path.join(TOP, "src", "daemon", "api.c")
API_YAML = os.path.join(TOP, "docs", "api.yaml")
METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")


def route_table(path=API_C):
    """(METHOD, pattern) of every line of kosa8d.sock's route table."""
    with open(path) as f:
        src = f.read()
    m = re.search(r"static const struct api_route routes\[\] = \{(.*?)\n\};", src, re.S)
    assert m, "no routes[] table in " + path
    rows = re.findall(r'\{\s*"([A-Z]+)",\s*"(/[^"]*)",\s*\w+\s*\}', m.group(1))
    assert len(rows) == len(re.findall(r"^\s*\{", m.group(1), re.M)), \
        "a line of the table this test cannot read"
    return rows


def shape(pattern):
    """A path with its parameters' names taken out: /v1/x/{name} -> /v1/x/{}."""
    return re.sub(r"\{[^}/]+\}", "{}", pattern)


def load(path=API_YAML):
    with open(path) as f:
        return yaml.safe_load(f)


def operations(doc):
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method in METHODS:
                yield path, method, op


def compare(table, doc):
    """Messages for every disagreement; empty when they agree."""
    routes = {(m, shape(p)) for m, p in table}
    ops = {(m.upper(), shape(p)) for p, m, _ in operations(doc)}
    msgs = []
    for m, p in sorted(routes - ops):
        other = sorted(om for om, op in ops if op == p)
        msgs.append("%s %s is a route of api.c but not in docs/api.yaml%s" %
                    (m, p, " (which has it as %s)" % ", ".join(other) if other else ""))
    for m, p in sorted(ops - routes):
        other = sorted(rm for rm, rp in routes if rp == p)
        msgs.append("%s %s is in docs/api.yaml but api.c has no such route%s" %
                    (m, p, " (it takes %s)" % ", ".join(other) if other else ""))
    return msgs


def test_every_route_is_documented_and_every_operation_routed():
    msgs = compare(route_table(), load())
    assert not msgs, "\n".join(msgs)


def test_the_comparison_sees_each_kind_of_disagreement():
    doc = load()
    table = route_table()
    assert compare(table, doc) == []
    # a route the document lacks, an operation the table lacks, a method that differs
    assert any("not in docs/api.yaml" in m for m in compare(table + [("GET", "/v1/new")], doc))
    doc2 = load()
    doc2["paths"]["/v1/extra/{x}"] = {"get": {"responses": {"200": {"description": "x"}}}}
    assert any("has no such route" in m for m in compare(table, doc2))
    doc3 = load()
    doc3["paths"]["/v1/status"]["post"] = doc3["paths"]["/v1/status"].pop("get")
    msgs = compare(table, doc3)
    assert any("GET /v1/status is a route" in m and "as POST" in m for m in msgs), msgs


def resolve(doc, ref):
    assert ref.startswith("#/"), ref
    node = doc
    for part in ref[2:].split("/"):
        assert isinstance(node, dict) and part in node, "unresolved $ref " + ref
        node = node[part]
    return node


def refs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref":
                yield v
            else:
                yield from refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from refs(v)


def test_the_document_holds_together():
    doc = load()
    assert str(doc["openapi"]).startswith("3.1"), doc["openapi"]
    assert doc["info"]["title"] and doc["info"]["version"]
    for r in refs(doc):
        resolve(doc, r)
    ids = [op.get("operationId") for _, _, op in operations(doc)]
    assert all(ids) and len(ids) == len(set(ids)), "operationIds missing or repeated"
    for path, method, op in operations(doc):
        assert op.get("responses"), "%s %s answers nothing" % (method, path)
        assert "default" in op["responses"], "%s %s has no error answer" % (method, path)
        declared = set()
        for prm in op.get("parameters", []) + doc["paths"][path].get("parameters", []):
            prm = resolve(doc, prm["$ref"]) if "$ref" in prm else prm
            if prm["in"] == "path":
                declared.add(prm["name"])
                assert prm.get("required") is True, (path, prm["name"])
        want = set(re.findall(r"\{([^}/]+)\}", path))
        assert want == declared, "%s %s: path parameters %s, declared %s" % (
            method, path, sorted(want), sorted(declared))
    assert resolve(doc, "#/components/schemas/Error")["required"] == ["error"]
