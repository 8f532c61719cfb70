# VmRSS of PID every PERIOD s (0.005): a line "HH:MM:SS.mmm MB" whenever it moved by 8 MB
# or a second passed. Used by rss.sh to see when, and for how long, RSS stays near VmHWM.
import sys, time, os
pid = sys.argv[1]; period = float(sys.argv[2]) if len(sys.argv) > 2 else 0.005
pg = os.sysconf("SC_PAGE_SIZE") / 1048576
last = -1; lastt = 0
f = open(f"/proc/{pid}/statm")
while True:
    try:
        f.seek(0); rss = int(f.read().split()[1]) * pg
    except Exception:
        break
    t = time.time()
    if abs(rss - last) >= 8 or t - lastt >= 1:
        print(f"{time.strftime('%H:%M:%S', time.gmtime(t))}.{int(t*1000)%1000:03d} {rss:.0f}", flush=True)
        last, lastt = rss, t
    time.sleep(period)
