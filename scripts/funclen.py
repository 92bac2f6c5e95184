#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# funclen.py - the length of each C function in the files given (kosa8's layout: a
# function's body opens with "{" and closes with "}" in column 0; its length counts from
# the first line of its signature to that "}"). Prints the longest first.
#   funclen.py [--top N] [--max N [--allow NAME]...] FILE...
#   --max N: list only functions longer than N lines and exit 1 if there is one but those
#   --allow names (`make check-layers` runs it on src/daemon with 120: docs/design.md).
import re
import sys

SIG_START = re.compile(r"^[A-Za-z_][A-Za-z0-9_ \t\*]*\(|^[A-Za-z_]")


def functions(path):
    """(name, first line, last line) of each function definition in path."""
    with open(path, errors="replace") as f:
        lines = f.read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        if lines[i] == "{":
            # the signature: back to the first line of this declaration (a line in column 0
            # that is not a comment, a preprocessor line or a closing brace)
            j = i - 1
            while j > 0 and lines[j - 1].strip() and not lines[j - 1].startswith(("}", "#", "/*", " *", "*/")) \
                    and not lines[j - 1].rstrip().endswith((";", "*/")) and (lines[j].startswith(("\t", " ")) or not re.match(r"^[A-Za-z_]", lines[j])):
                j -= 1
            sig = " ".join(l.strip() for l in lines[j:i])
            m = re.search(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(", sig)
            k = i + 1
            while k < len(lines) and lines[k] != "}":
                k += 1
            if m and not sig.startswith(("struct", "static const", "const", "enum", "union")) \
                    or (m and "(" in sig and sig.startswith("static const char *")):
                out.append((m.group(1), j + 1, k + 1))
            i = k + 1
            continue
        i += 1
    return out


def main(argv):
    top, mx, files, allow = 20, None, [], set()
    it = iter(argv[1:])
    for a in it:
        if a == "--top":
            top = int(next(it))
        elif a == "--max":
            mx = int(next(it))
        elif a == "--allow":
            allow.add(next(it))
        else:
            files.append(a)
    rows = []
    for p in files:
        for name, a, b in functions(p):
            rows.append((b - a + 1, p, a, name))
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    if mx is not None:
        over = [r for r in rows if r[0] > mx and r[3] not in allow]
        for n, p, a, name in over:
            print("funclen: %s:%d %s is %d lines (at most %d: split it into named steps)"
                  % (p, a, name, n, mx), file=sys.stderr)
        return 1 if over else 0
    print("%6s  %s" % ("lines", "function"))
    for n, p, a, name in rows[:top]:
        print("%6d  %s (%s:%d)" % (n, name, p, a))
    big = [r for r in rows if r[0] > 120]
    print("functions: %d; over 120 lines: %d; over 80: %d"
          % (len(rows), len(big), len([r for r in rows if r[0] > 80])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
