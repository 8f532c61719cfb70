#!/usr/bin/env python3
"""Builds corpus.cql from base.cql: the base statements plus deterministic mutations
(token deleted, duplicated, misspelt, truncated) and extra hand-written cases.
One statement per line; a newline inside a statement is written as the two characters \\n."""
import random
import re
import sys
from pathlib import Path

here = Path(__file__).parent
TOKEN = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\$\$.*?\$\$|[A-Za-z_][A-Za-z0-9_]*|\d[\w.-]*|\.\.|[<>!]=|\+=|-=|\S")

base = [l for l in (here / "base.cql").read_text().splitlines() if l.strip()]
extra = [l for l in (here / "extra.cql").read_text().splitlines() if l.strip() and not l.startswith("#")]
rng = random.Random(7)
out = []
seen = set()

def add(q):
    if q not in seen:
        seen.add(q)
        out.append(q)

for q in base + extra:
    add(q)
for q in base:
    spans = [m.span() for m in TOKEN.finditer(q)]
    picks = rng.sample(range(len(spans)), min(6, len(spans)))
    for i in picks:
        a, b = spans[i]
        add((q[:a] + q[b:]).strip())                       # delete a token
        add(q[:b] + " " + q[a:b] + q[b:])                  # duplicate it
        tok = q[a:b]
        if len(tok) > 2 and tok[0].isalpha():
            add(q[:a] + tok[:-1] + q[b:])                  # misspell it
        add(q[:b].strip())                                 # truncate after it
sys.stdout.write("\n".join(out) + "\n")
