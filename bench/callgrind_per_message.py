#!/usr/bin/env python3
"""Instructions per message from one thread's callgrind file: self,
inclusive (summed over call edges) and calls, of the functions matching each
regex (bench/drain_callgrind.sh writes the files).

  callgrind_per_message.py FILE N_MESSAGES [REGEX...]
  e.g. callgrind_per_message.py cg-onceq.123-07 50000 'broker::consume' 'MemTable::Add'
"""
import re, sys, collections
def parse(path):
    names = {}; selfc = collections.Counter(); incl_calls = collections.Counter(); ncalls = collections.Counter()
    edges = collections.Counter()  # (caller, callee) -> inclusive
    edgecalls = collections.Counter()
    sysc = collections.Counter()
    fn = None; cfn = None; pending = None
    def nm(s, table):
        m = re.match(r'\((\d+)\)(?: (.*))?', s)
        if not m: return s
        if m.group(2): table[m.group(1)] = m.group(2)
        return table.get(m.group(1), m.group(1))
    fl = {}
    with open(path, errors='replace') as f:
        for line in f:
            line = line.rstrip('\n')
            if not line: continue
            c = line[0]
            if line.startswith('fn='):
                fn = nm(line[3:], names); continue
            if line.startswith('cfn='):
                cfn = nm(line[4:], names); continue
            if line.startswith(('fl=', 'fi=', 'fe=', 'ob=', 'cob=', 'cfi=', 'cfl=')):
                continue
            if line.startswith('calls='):
                pending = int(line[6:].split()[0]); continue
            if c.isdigit() or c in '+-*':
                parts = line.split()
                vals = [int(x) for x in parts[1:]]
                ir = vals[0] if vals else 0
                sc = vals[1] if len(vals) > 1 else 0
                if pending is not None:
                    if cfn != fn:
                        edges[(fn, cfn)] += ir; edgecalls[(fn, cfn)] += pending
                    ncalls[cfn] += pending
                    pending = None
                else:
                    selfc[fn] += ir; sysc[fn] += sc
    return names, selfc, edges, edgecalls, ncalls, sysc
if __name__ == '__main__':
    names, selfc, edges, edgecalls, ncalls, sysc = parse(sys.argv[1])
    n = int(sys.argv[2])
    incl = collections.Counter(selfc)
    for (a, b), v in edges.items(): incl[a] += v
    tot = sum(selfc.values())
    print('total', tot, 'per msg', tot / n)
    for pat in sys.argv[3:]:
        r = re.compile(pat)
        for f in sorted((f for f in incl if r.search(f)), key=lambda f: -incl[f])[:8]:
            print(f'{incl[f]/n:9.0f} incl/msg {selfc[f]/n:8.0f} self/msg {ncalls[f]/n:8.3f} calls/msg  {f[:150]}')
