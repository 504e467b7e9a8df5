#!/usr/bin/env python3
"""An outside client of mend's HTTP API, in the standard library only, as a user of another
language would write it from docs/http-api.md alone: it owns the HTTP side of the acceptance
specs (spec/acceptance_http_*_spec.lua), which start the servers and read what it prints.

    http_client.py BASE GROUP [NAME=VALUE ...]

runs the checks of GROUP against the server at BASE (http://127.0.0.1:PORT) and prints one
line per check, "ok NAME" or "FAIL NAME: why"; exit 0 when every check passed. A check
labelled a defect (DEFECTS below) is skipped, and printed "defect NAME", unless NAME is given
in MEND_ACCEPT_DEFECTS (a comma-separated list, or "all"): the spec keeps it pending, so that
the suite stays green while the defect is there, and runs it on demand. It never reads the
database nor mend's sources: what it knows of mend is what the documents say.
"""
import os
import sys

import acc_http
import acc_http_repairs  # noqa: F401  (registers its checks)
import acc_http_runs  # noqa: F401


def main():
    acc_http.BASE = sys.argv[1].rstrip("/")
    group = sys.argv[2]
    for a in sys.argv[3:]:
        k, v = a.split("=", 1)
        acc_http.ARGS[k] = v
    run_defects = set(filter(None, os.environ.get("MEND_ACCEPT_DEFECTS", "").split(",")))
    failed = 0
    for fn in acc_http.GROUPS[group]:
        name = fn.__name__
        if name in acc_http.DEFECTS and not ({"all", name} & run_defects):
            print("defect %s: %s" % (name, acc_http.DEFECTS[name]))
            continue
        try:
            fn()
            print("ok " + name)
        except Exception as e:   # a check's failure, whatever raised it
            failed += 1
            print("FAIL %s: %s: %s" % (name, type(e).__name__, e))
        sys.stdout.flush()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
