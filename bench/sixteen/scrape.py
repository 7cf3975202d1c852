"""Polls one onceqd's /metrics every 0.25 s while its pid lives and prints one
line when it exits: the peak loop busy and CPU-wait ratios seen, the
connection moves (migrated, spread) and the idle cores the server read. Used by bench/sixteen/run.sh."""
import os
import re
import sys
import time
import urllib.request

port, pid, label = sys.argv[1], int(sys.argv[2]), sys.argv[3]
line = re.compile(r'^(onceq_shard_loop_busy_ratio|onceq_shard_loop_cpu_wait_ratio)\{shard="(\d+)"\} (\S+)'
                  r'|^(onceq_connections_migrated_total|onceq_connections_spread_total) (\S+)', re.M)
idle_line = re.compile(r'^onceq_cpu_idle_cores (\S+)', re.M)
idle_seen = []
peak_busy, peak_wait, busy_loops, moves, samples = {}, {}, 0, {}, 0
while os.path.exists(f"/proc/{pid}"):
    time.sleep(0.25)
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1).read().decode()
    except Exception:
        continue
    samples += 1
    loops = 0
    for m in line.finditer(text):
        if m.group(1):
            v = float(m.group(3))
            d = peak_busy if m.group(1).endswith("busy_ratio") else peak_wait
            d[m.group(2)] = max(d.get(m.group(2), 0.0), v)
            if m.group(1).endswith("busy_ratio") and v >= 0.2:
                loops += 1
        else:
            moves[m.group(4)] = int(float(m.group(5)))
    busy_loops = max(busy_loops, loops)
    m = idle_line.search(text)
    if m and float(m.group(1)) >= 0:
        idle_seen.append(float(m.group(1)))
top = sorted(peak_busy.items(), key=lambda kv: -kv[1])[:4]
print(f"METRICS {label} samples={samples} "
      f"migrated={moves.get('onceq_connections_migrated_total', 0)} "
      f"spread={moves.get('onceq_connections_spread_total', 0)} "
      f"loops_over_0.2_busy={busy_loops} "
      f"peak_busy={','.join(f'{k}:{v:.2f}' for k, v in top)} "
      f"peak_wait={max(peak_wait.values(), default=0):.2f} "
      f"idle_cores={min(idle_seen, default=-1):.1f}..{max(idle_seen, default=-1):.1f}", flush=True)
