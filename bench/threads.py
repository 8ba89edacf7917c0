#!/usr/bin/env python3
"""threads.py PID SECONDS: the CPU use of process PID's threads over SECONDS, grouped by name
(trailing digits stripped: blurd names its threads blurd-http, blurd-w12, ...), with the busiest
thread of each group; then the host's busy cores and the CPU of every wrk process (bench/gpu_scale.sh)."""
import os, re, sys, time
pid, secs = int(sys.argv[1]), float(sys.argv[2])
hz = os.sysconf('SC_CLK_TCK')
def threads():
    out = {}
    for t in os.listdir(f'/proc/{pid}/task'):
        try:
            s = open(f'/proc/{pid}/task/{t}/stat').read()
        except OSError:
            continue
        name = s[s.index('(') + 1:s.rindex(')')]
        f = s[s.rindex(')') + 2:].split()
        out[t] = (name, int(f[11]) + int(f[12]))
    return out
def host():
    f = open('/proc/stat').readline().split()[1:]
    v = list(map(int, f))
    return sum(v), v[3] + v[4]
def wrk():
    tot = 0
    for p in os.listdir('/proc'):
        if p.isdigit():
            try:
                s = open(f'/proc/{p}/stat').read()
            except OSError:
                continue
            if '(wrk)' in s:
                f = s[s.rindex(')') + 2:].split()
                tot += int(f[11]) + int(f[12])
    return tot
a, h0, w0 = threads(), host(), wrk()
time.sleep(secs)
b, h1, w1 = threads(), host(), wrk()
groups = {}
for t, (name, c) in b.items():
    d = (c - a.get(t, (name, c))[1]) / hz / secs
    g = re.sub(r'\d+$', '', name)
    n, tot, mx = groups.get(g, (0, 0.0, 0.0))
    groups[g] = (n + 1, tot + d, max(mx, d))
for g, (n, tot, mx) in sorted(groups.items(), key=lambda x: -x[1][1]):
    print(f'  threads {g:16s} n={n:4d} cores={tot:6.2f} busiest={mx:5.2f}')
tt, ti = h1[0] - h0[0], h1[1] - h0[1]
print(f'  host busy {(tt - ti) / tt * os.cpu_count():.1f} of {os.cpu_count()} cores; wrk {(w1 - w0) / hz / secs:.1f} cores')
