#!/usr/bin/env python3
"""A worker after a lock among many starts, by hand (not a ctest: its figures depend on the
machine; spec/lock_claim_spec.lua is the test of the cause). One worker (--poll 0.05), N (100)
concurrent `mend start`, and a sqlite3 shell holding BEGIN IMMEDIATE for HOLD (1.4) s among
them. Prints, from the runs' own `updated` times, when the worker finished runs after the
lock's release, and how many starts failed. An idle worker whose claim met the lock used to
look for no work again until a write of its own began a batch: it finished nothing more.

    MEND_BIN=build/mend python3 tests/lock_after_starts.py [DIR] [worker flags...]
"""
import os, shutil, subprocess, sys, time, sqlite3

M = os.environ.get("MEND_BIN", "build/mend")
D = sys.argv[1] if len(sys.argv) > 1 else f"/tmp/mend-lock-after-starts-{os.getpid()}"
N = int(os.environ.get("N", "100"))
HOLD = float(os.environ.get("HOLD", "1.4"))
shutil.rmtree(D, ignore_errors=True)
os.makedirs(D + "/wf")
with open(D + "/wf/one.lua", "w") as f:
    f.write('return { name = "one", steps = {\n'
            '  { name = "a", execute = function() return 1 end } } }\n')
DB = D + "/db"
start = [M, "start", "one", "--db", DB, "--workflows", D + "/wf"]
subprocess.run(start, check=True, stdout=subprocess.DEVNULL)
log = open(D + "/worker.log", "w")
worker = subprocess.Popen([M, "worker", "--db", DB, "--workflows", D + "/wf", "--poll", "0.05",
                           "--log-level", "debug"] + sys.argv[2:], stderr=log)
time.sleep(1.5)
starts, lock = [], None
t_begin = time.time()
for i in range(N):
    starts.append(subprocess.Popen(start, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    if i == N // 2:
        # the shell waits for the starts' commits (.timeout) to take the lock, holds it HOLD s
        lock = subprocess.Popen(["sqlite3", DB], stdin=subprocess.PIPE, text=True)
        lock.stdin.write(f".bail on\n.timeout 20000\nBEGIN IMMEDIATE;\n"
                         f"INSERT INTO meta VALUES('lock-test', 'x');\n"
                         f".system date +%s.%N > {D}/took\n.system sleep {HOLD}\n"
                         f".system date +%s.%N > {D}/freed\nROLLBACK;\n.quit\n")
        lock.stdin.flush()
lock.stdin.close(); lock.wait()
lock_begin = float(open(D + "/took").read())
lock_end = float(open(D + "/freed").read())
failed = 0
for p in starts:
    _, err = p.communicate()
    if p.returncode != 0:
        failed += 1
        sys.stderr.write(err.decode())
starts_done = time.time()
deadline = time.time() + float(os.environ.get("WAIT", "60"))
con = sqlite3.connect(DB, timeout=10)
while time.time() < deadline:
    n = con.execute("select count(*) from runs where status = 'succeeded'").fetchone()[0]
    if n >= N + 1 - failed: break
    time.sleep(0.05)
all_seen = time.time()
worker.terminate(); worker.wait()
ends = sorted(r[0] for r in con.execute("select updated from runs where status = 'succeeded'"))
after = [t for t in ends if t >= lock_end]
gaps = [b - a for a, b in zip([lock_end] + after, after)]
print(f"starts: {N}, failed {failed}; runs succeeded {len(ends)}")
print(f"lock held {lock_end - lock_begin:.2f} s; "
      f"starts all exited {starts_done - lock_end:+.2f} s after its release")
if after:
    print(f"first completion after the release: {after[0] - lock_end:+.2f} s; "
          f"last: {after[-1] - lock_end:+.2f} s")
    g = max(range(len(gaps)), key=lambda i: gaps[i])
    ending = ([lock_end] + after)[g + 1] - lock_end
    print(f"longest gap between completions after the release: {gaps[g]:.2f} s "
          f"(ending at {ending:+.2f} s)")
else:
    print("no run finished after the release")
print(f"lock released at {lock_end:.3f}; log: {D}/worker.log")
sys.exit(0 if len(ends) >= N + 1 - failed else 1)
