#!/usr/bin/env python3
# bench/http_allocs.py SMALL LARGE EXTRA: allocator calls a run (or a request) from two callgrind
# profiles of one thread (bench/http_cost.sh's 1,000- and 3,000-run ones: EXTRA is the 2,000
# between them), by the object their caller is in (mend's module, lua5.4, libcurl, SQLite, ...).
# Call counts are exact, not sampled: they do not move with the machine's load. strdup is counted
# as an allocation of its caller's; realloc as its own column (a realloc of NULL allocates). Reads
# callgrind's output format only; decides nothing.
import collections
import re
import sys

ALLOC = {"malloc": "alloc", "calloc": "alloc", "strdup": "alloc", "realloc": "realloc",
         "free": "free"}


def edges(path):
    """(caller, callee) -> calls, and each function's object, from a callgrind profile."""
    names, objs = {}, {}
    calls, obj_of = collections.Counter(), {}
    fn = cfn = ob = None

    def name(text, table):
        m = re.match(r"\((\d+)\)(?: (.*))?", text)
        if not m:
            return text
        if m.group(2):
            table[m.group(1)] = m.group(2)
        return table.get(m.group(1), text)

    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("ob="):
                ob = name(line[3:].strip(), objs)
            elif line.startswith("cob="):
                name(line[4:].strip(), objs)
            elif line.startswith("fn="):
                fn = name(line[3:].strip(), names)
                obj_of[fn] = ob
            elif line.startswith("cfn="):
                cfn = name(line[4:].strip(), names)
            elif line.startswith("calls="):
                calls[(fn, cfn)] += int(line.split()[0][6:])
    return calls, obj_of


def main():
    small, large, extra = sys.argv[1], sys.argv[2], float(sys.argv[3])
    a, _ = edges(small)
    b, obj_of = edges(large)
    per = collections.Counter()
    # Calls made inside the allocator's own wrappers (strdup's malloc, SQLite's through its PLT
    # stubs) are counted where the wrapper was called.
    inner = {callee for (caller, callee) in b if caller in ALLOC}
    for key in set(a) | set(b):
        caller, callee = key
        kind = ALLOC.get(callee)
        if not kind or caller in ALLOC or caller in inner:
            continue
        obj = (obj_of.get(caller) or "?").rsplit("/", 1)[-1]
        if obj in ("?", "???"):   # a PLT stub: SQLite calls malloc and free through them
            obj = "libsqlite3"
        per[(re.sub(r"\.so.*$", "", obj), kind)] += (b[key] - a[key]) / extra
    for obj in sorted({o for o, _ in per}):
        row = [per[(obj, k)] for k in ("alloc", "realloc", "free")]
        if max(abs(v) for v in row) >= 0.05:
            print("  %-12s %7.2f allocations %6.2f reallocs %7.2f frees" % (obj, *row))


main()
