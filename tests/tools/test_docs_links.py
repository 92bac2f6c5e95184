# SPDX-License-Identifier: Apache-2.0
"""Every page the sources and the docs point at exists (issue 26: three headers named
docs/checkpoints.md, docs/egress.md and docs/bundle.md, which never did): a `docs/X.md` in any
tracked file, and a relative link in a Markdown page, resolve to a file of the checkout."""
import os
import re
import subprocess

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# Files whose docs/... paths are test data (.dockerignore patterns, build contexts, this
# file's own examples), not links.
DATA = {"tests/unit/test_docker_ignore.c", "tests/fuzz/fuzz_dockerfile.c",
        "tests/tools/test_docs_links.py"}
DOC_PATH = re.compile(r"\bdocs/[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md\b")
MD_LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)")


def tracked():
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=TOP,
                         capture_output=True, text=True, check=True).stdout
    for f in out.split():
        p = os.path.join(TOP, f)
        if f in DATA or not os.path.isfile(p):
            continue
        try:
            with open(p, encoding="utf-8") as fh:
                yield f, fh.read()
        except UnicodeDecodeError:
            continue


def test_every_docs_path_exists():
    missing = sorted({(f, m.group(0)) for f, text in tracked()
                      for m in DOC_PATH.finditer(text)
                      if not os.path.isfile(os.path.join(TOP, m.group(0)))})
    assert not missing, "\n".join("%s names %s, which does not exist" % x for x in missing)


def test_every_markdown_link_resolves():
    missing = []
    for f, text in tracked():
        if not f.endswith(".md"):
            continue
        for m in MD_LINK.finditer(text):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue
            if not os.path.isfile(os.path.normpath(os.path.join(TOP, os.path.dirname(f),
                                                                target))):
                missing.append("%s links %s, which does not exist" % (f, target))
    assert not missing, "\n".join(missing)


def test_the_docs_index_lists_every_page():
    """docs/README.md sorts every page into what a user reads and the decision records."""
    with open(os.path.join(TOP, "docs", "README.md")) as fh:
        index = fh.read()
    pages = [os.path.relpath(os.path.join(d, n), os.path.join(TOP, "docs"))
             for d, _, names in os.walk(os.path.join(TOP, "docs")) for n in names
             if n.endswith(".md") and n != "README.md"]
    unlisted = sorted(p for p in pages if "(%s)" % p not in index)
    assert not unlisted, "docs/README.md does not list: %s" % ", ".join(unlisted)
