#!/usr/bin/env python3
"""Standalone benchmark: Ray vs Dask distributed as the engine for shard workers.

Not imported by anything. Only the standard library is imported here; each engine
is exercised in a child interpreter (the engine's own venv python), so this file
can be run by any Python 3.8+.

Each measurement records the 1-minute load average at the time it was taken
(other jobs may share the machine).

Example:

    python3 -m venv /tmp/eng-ray  && /tmp/eng-ray/bin/pip install ray numpy
    python3 -m venv /tmp/eng-dask && /tmp/eng-dask/bin/pip install distributed numpy
    python3 bench/engines.py \
        --engine ray=/tmp/eng-ray/bin/python --engine dask=/tmp/eng-dask/bin/python \
        --wheels ray=/tmp/eng-ray-wheels --wheels dask=/tmp/eng-dask-wheels \
        --json /tmp/eng-results.json

--wheels NAME=DIR sums the wheel files in DIR (made by `pip download -d DIR PKG numpy`);
--download makes such a directory itself in a temporary folder.

What is measured per engine:
  install   site-packages bytes added to a fresh venv (st_blocks, as du), of which numpy
  wheels    total bytes of the downloaded wheels (engine + numpy + deps)
  import    `python -X importtime -c "import ray|distributed"`: cumulative import time of
            the top module and the wall time of the whole command; best of N (5)
  start     ray.init(num_cpus=2) / LocalCluster(n_workers=2, threads_per_worker=1,
            processes=True) + Client; best of N (3), each in a fresh interpreter
  rss       after --idle-wait seconds idle: sum of VmRSS (and Pss) of all processes
            descended from the driver, plus the driver itself
  ports     TCP sockets in LISTEN state owned by the driver or its descendants
  rtt       submit 2 tasks that each run `python -c "import numpy; print(1)"` with
            subprocess.run and return numpy.zeros(12000, int64) (~96 KB), gather both;
            1 warm-up round, then best and median of N (10) rounds
The baseline runs the same two tasks via a pre-started ProcessPoolExecutor(2) and via
two plain subprocess.Popen in parallel (no result transfer for the latter).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import contextlib

PKG = {"ray": "ray", "dask": "distributed"}
MODULE = {"ray": "ray", "dask": "distributed"}

# --------------------------------------------------------------------------------------
# Code run inside the engine's interpreter (python -c INNER MODE ARGS_JSON).
# It prints one line "RESULT <json>".
INNER = r'''
import json, os, statistics, subprocess, sys, time

MODE = sys.argv[1]
ARGS = json.loads(sys.argv[2])


def proc_stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    rest = s.rsplit(")", 1)[1].split()
    return int(rest[1])  # ppid


def descendants(root):
    kids = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            kids.setdefault(proc_stat(p), []).append(int(p))
        except Exception:
            pass
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def mem(pid):
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
    except Exception:
        pass
    return rss, pss


def name(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        argv = [a.decode(errors="replace") for a in argv if a]
        if len(argv) > 2 and argv[1] == "-c" and "\n" in argv[2]:
            argv = argv[:2] + ["<bench>"]
        return " ".join(argv)[:160]
    except Exception:
        return "?"


def listening(pids):
    inodes = {}
    for fn in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(fn) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if parts[3] != "0A":
                        continue
                    addr, port = parts[1].split(":")
                    if len(addr) == 8:
                        ip = ".".join(str(int(addr[i:i + 2], 16)) for i in (6, 4, 2, 0))
                    else:
                        ip = "::" if set(addr) == {"0"} else "v6:" + addr
                    inodes[parts[9]] = f"{ip}:{int(port, 16)}"
        except FileNotFoundError:
            pass
    out = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except Exception:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except Exception:
                continue
            if link.startswith("socket:["):
                ino = link[8:-1]
                if ino in inodes:
                    n = name(pid).split()
                    n[0] = os.path.basename(n[0])
                    out.append({"addr": inodes[ino], "pid": pid, "proc": " ".join(n)[:70]})
    return sorted(out, key=lambda d: d["addr"])


def shm_used():
    st = os.statvfs("/dev/shm")
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def shard():
    import os, subprocess, sys, time, numpy
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import numpy; print(1)"],
                   check=True, stdout=subprocess.DEVNULL)
    return (os.getpid(), numpy.zeros(12000, dtype=numpy.int64), time.perf_counter() - t,
            os.environ.get("OMP_NUM_THREADS"))


def summarize(lat, over, pids, envs, first, loads):
    return {"first_s": first, "best_s": min(lat), "median_s": statistics.median(lat),
            "overhead_best_s": min(over), "overhead_median_s": statistics.median(over),
            "all_s": lat, "distinct_worker_pids": len(pids), "task_OMP_NUM_THREADS": sorted(envs),
            "load1": statistics.median(loads)}


def rounds(fns, n):
    """fns: {label: run_two}. Rounds are interleaved across labels so they see the same load.
    overhead = round trip minus the longer of the two subprocess runs (measured in the task)."""
    acc = {k: ([], [], set(), set(), None) for k in fns}
    firsts = {}
    for k, f in fns.items():
        t = time.perf_counter(); f(); firsts[k] = time.perf_counter() - t
    loads = []
    for _ in range(n):
        loads.append(os.getloadavg()[0])
        for k, f in fns.items():
            t = time.perf_counter()
            res = f()
            dt = time.perf_counter() - t
            lat, over, pids, envs, _ = acc[k]
            lat.append(dt)
            over.append(dt - max(r[2] for r in res))
            pids.update(r[0] for r in res)
            envs.update(str(r[3]) for r in res)
            assert all(r[1].nbytes == 96000 for r in res)
    return {k: summarize(*acc[k][:4], firsts[k], loads) for k in fns}


def baseline_fns(ex):
    def pool_two():
        return [f.result() for f in [ex.submit(shard), ex.submit(shard)]]

    def popen_two():
        import numpy
        t = time.perf_counter()
        ps = [subprocess.Popen([sys.executable, "-c", "import numpy; print(1)"],
                               stdout=subprocess.DEVNULL) for _ in range(2)]
        for p in ps:
            p.wait()
        dt = time.perf_counter() - t
        return [(p.pid, numpy.zeros(12000, dtype=numpy.int64), dt, os.environ.get("OMP_NUM_THREADS"))
                for p in ps]
    return {"processpool": pool_two, "subprocess": popen_two}


def make_pool():
    import concurrent.futures as cf
    import multiprocessing as mp
    ex = cf.ProcessPoolExecutor(2, mp_context=mp.get_context("fork"))
    list(ex.map(abs, [1, 2]))  # start the pool's processes
    return ex


def main():
    me = os.getpid()
    if MODE == "baseline":
        ex = make_pool()
        out = rounds(baseline_fns(ex), ARGS["rounds"])
        ex.shutdown()
        print("RESULT " + json.dumps(out), flush=True)
        return

    # The baseline pool is forked before the engine is imported (forking after would copy
    # the engine's threads); its rounds are interleaved with the engine's.
    ex = make_pool() if ARGS["rounds"] else None

    engine = MODE
    shm0 = shm_used()
    rss_pre = mem(me)
    t0 = time.perf_counter()
    if engine.startswith("ray"):
        import ray
        t1 = time.perf_counter()
        ctx = ray.init(num_cpus=2, **ARGS["init_kwargs"])
        t2 = time.perf_counter()
        info = {"version": ray.__version__, "dashboard_url": ctx.dashboard_url,
                "object_store_bytes": ray.available_resources().get("object_store_memory")}
        rshard = ray.remote(shard)

        def run_two():
            return ray.get([rshard.remote(), rshard.remote()])

        def stop():
            ray.shutdown()
    else:
        import distributed
        t1 = time.perf_counter()
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           **ARGS["init_kwargs"])
        client = distributed.Client(cluster)
        t2 = time.perf_counter()
        info = {"version": distributed.__version__, "dashboard_url": cluster.dashboard_link}

        def run_two():
            fs = [client.submit(shard, pure=False), client.submit(shard, pure=False)]
            return client.gather(fs)

        def stop():
            client.close()
            cluster.close()
    load_start = os.getloadavg()[0]
    time.sleep(ARGS["idle_wait"])
    pool = set(ex._processes) if ex else set()  # the baseline pool is not the cluster's
    kids = [p for p in descendants(me) if p not in pool]
    procs = []
    for p in kids:
        n = name(p)
        if n.startswith(("ps ", "sh -c")):
            continue
        r, s = mem(p)
        procs.append({"pid": p, "rss": r, "pss": s, "cmd": n[:100]})
    drv_rss, drv_pss = mem(me)
    out = {
        "import_in_process_s": t1 - t0,
        "start_s": t2 - t1,
        "load1_start": load_start,
        "children": len(procs),
        "children_rss": sum(p["rss"] for p in procs),
        "children_pss": sum(p["pss"] for p in procs),
        "driver_rss_before_start": rss_pre[0],
        "driver_rss": drv_rss,
        "driver_pss": drv_pss,
        "load1_idle": os.getloadavg()[0],
        "procs": procs,
        "listening": listening([me] + kids),
        "shm_used_delta": shm_used() - shm0,
        **info,
    }
    if ARGS["rounds"]:
        r = rounds({"engine": run_two, **baseline_fns(ex)}, ARGS["rounds"])
        out["rtt"] = r.pop("engine")
        out["rtt_baseline_interleaved"] = r
        ex.shutdown()
    t3 = time.perf_counter()
    stop()
    out["shutdown_s"] = time.perf_counter() - t3
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
'''


def run_inner(python, mode, args, timeout=600):
    p = subprocess.run([python, "-c", INNER, mode, json.dumps(args)], capture_output=True,
                       text=True, timeout=timeout, cwd=tempfile.gettempdir())
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{python} {mode} failed rc={p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")


def load1():
    return os.getloadavg()[0]


def du_bytes(path):
    tot = 0
    for root, dirs, files in os.walk(path):
        for f in files + dirs:
            with contextlib.suppress(OSError):
                tot += os.lstat(os.path.join(root, f)).st_blocks * 512
    return tot


FRESH_VENV = ("pip", "setuptools", "_distutils_hack", "pkg_resources", "distutils-precedence.pth")


def install_size(python):
    sp = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        capture_output=True, text=True, check=True).stdout.strip()
    total = added = numpy = 0
    for entry in os.listdir(sp):
        p = os.path.join(sp, entry)
        b = du_bytes(p) if os.path.isdir(p) else os.lstat(p).st_blocks * 512
        total += b
        base = entry.split("-")[0]
        if base in FRESH_VENV or entry in FRESH_VENV:
            continue
        added += b
        if base.lower() in ("numpy", "numpy.libs"):
            numpy += b
    return {"site_packages": sp, "site_packages_bytes": total, "added_bytes": added,
            "numpy_bytes": numpy, "load1": load1()}


def wheel_size(python, pkg, wdir):
    tmp = None
    if wdir is None:
        tmp = tempfile.mkdtemp(prefix="eng-wheels-")
        subprocess.run([python, "-m", "pip", "download", "-q", "-d", tmp, pkg, "numpy"], check=True)
        wdir = tmp
    files = sorted(((os.path.getsize(os.path.join(wdir, f)), f) for f in os.listdir(wdir)), reverse=True)
    out = {"dir": wdir, "total_bytes": sum(s for s, _ in files), "files": len(files),
           "largest": [f"{f} {s}" for s, f in files[:3]], "load1": load1()}
    if tmp:
        shutil.rmtree(tmp)
        out["dir"] = "(temporary, removed)"
    return out


def import_time(python, module, n):
    best_cum = best_wall = None
    loads = []
    for _ in range(n):
        loads.append(load1())
        t = time.perf_counter()
        p = subprocess.run([python, "-X", "importtime", "-c", f"import {module}"],
                           capture_output=True, text=True, check=True)
        wall = time.perf_counter() - t
        cum = None
        for line in p.stderr.splitlines():
            parts = [x.strip() for x in line.split("|")]
            if len(parts) == 3 and parts[2] == module:
                cum = int(parts[1]) / 1e6
        best_cum = cum if best_cum is None else min(best_cum, cum)
        best_wall = wall if best_wall is None else min(best_wall, wall)
    bare = min(_wall([python, "-c", "pass"]) for _ in range(n))
    return {"importtime_cumulative_s": best_cum, "wall_s": best_wall, "bare_python_wall_s": bare,
            "load1": loads}


def _wall(cmd):
    t = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - t


def mb(b):
    return f"{b / 1e6:.0f} MB" if b is not None else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", action="append", default=[], metavar="NAME=PYTHON",
                    help="ray=/tmp/eng-ray/bin/python or dask=/tmp/eng-dask/bin/python")
    ap.add_argument("--wheels", action="append", default=[], metavar="NAME=DIR")
    ap.add_argument("--init-kwargs", action="append", default=[], metavar="NAME=JSON",
                    help="extra keyword arguments for ray.init / LocalCluster of engine NAME, e.g. "
                         "'ray-nodash={\"include_dashboard\": false}' (engine names starting with "
                         "ray use Ray, others Dask)")
    ap.add_argument("--download", action="store_true", help="pip download wheels to measure their size")
    ap.add_argument("--baseline-python", help="python with numpy for the baseline (default: first engine's)")
    ap.add_argument("--imports", type=int, default=5)
    ap.add_argument("--starts", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--idle-wait", type=float, default=10.0)
    ap.add_argument("--json", help="write all results to this file")
    a = ap.parse_args()
    if not a.engine:
        ap.error("give at least one --engine NAME=PYTHON")
    engines = dict(e.split("=", 1) for e in a.engine)
    wheels = dict(w.split("=", 1) for w in a.wheels)
    kwargs = {k: json.loads(v) for k, v in (x.split("=", 1) for x in a.init_kwargs)}
    res = {"host": {"nproc": os.cpu_count(), "python": sys.version.split()[0],
                    "load1_at_start": load1(), "time": time.strftime("%Y-%m-%d %H:%M:%S")},
           "engines": {}}
    for name, py in engines.items():
        r = res["engines"][name] = {"python": py, "init_kwargs": kwargs.get(name, {})}
        print(f"[{name}] install size", file=sys.stderr, flush=True)
        kind = "ray" if name.startswith("ray") else "dask"
        r["install"] = install_size(py)
        if name in wheels or a.download:
            r["wheels"] = wheel_size(py, PKG[kind], wheels.get(name))
        print(f"[{name}] import x{a.imports}", file=sys.stderr, flush=True)
        r["import"] = import_time(py, MODULE[kind], a.imports)
        r["starts"] = []
        for i in range(a.starts):
            last = i == a.starts - 1
            print(f"[{name}] start {i + 1}/{a.starts}{' + rtt' if last else ''}", file=sys.stderr, flush=True)
            r["starts"].append(run_inner(py, "ray" if name.startswith("ray") else "dask",
                                         {"idle_wait": a.idle_wait, "init_kwargs": kwargs.get(name, {}),
                                          "rounds": a.rounds if last else 0}))
    bpy = a.baseline_python or next(iter(engines.values()))
    print("[baseline]", file=sys.stderr, flush=True)
    res["baseline"] = run_inner(bpy, "baseline", {"rounds": a.rounds})
    res["baseline"]["python"] = bpy

    # ---- table
    rows = []

    def rtt_cell(x):
        return "{:.3f} / {:.3f} (1st {:.2f}); ovh {:.3f} / {:.3f}".format(
            x["best_s"], x["median_s"], x["first_s"], x["overhead_best_s"], x["overhead_median_s"])
    for name, r in res["engines"].items():
        st = r["starts"]
        best = min(st, key=lambda s: s["start_s"])
        last = st[-1]
        rt = last.get("rtt", {})
        rows.append([
            f"{name} {last['version']}",
            mb(r["install"]["added_bytes"]) + f" (numpy {mb(r['install']['numpy_bytes'])})",
            mb(r["wheels"]["total_bytes"]) if "wheels" in r else "-",
            f"{r['import']['importtime_cumulative_s']:.2f} / {r['import']['wall_s']:.2f}",
            "{:.2f} [{}]".format(best["start_s"], ", ".join("{:.2f}".format(s["start_s"]) for s in st)),
            f"{mb(last['children_rss'])} + drv {mb(last['driver_rss'])} ({last['children']:d} procs; "
            f"PSS {mb(last['children_pss'] + last['driver_pss'])})",
            rtt_cell(rt) if rt else "-",
            "{:.2f}/{:.2f}/{:.2f}".format(max(r["import"]["load1"]), last["load1_idle"],
                                          rt.get("load1", float("nan"))),
        ])
    def rtt_cell(x):
        return "{:.3f} / {:.3f} (1st {:.2f}); ovh {:.3f} / {:.3f}".format(
            x["best_s"], x["median_s"], x["first_s"], x["overhead_best_s"], x["overhead_median_s"])
    for name, r in res["engines"].items():
        for k, x in r["starts"][-1].get("rtt_baseline_interleaved", {}).items():
            rows.append([f"  baseline {k} (w/ {name})", "-", "-", "-", "-", "-", rtt_cell(x),
                         "rtt {:.2f}".format(x["load1"])])
    b = res["baseline"]
    for k in ("processpool", "subprocess"):
        rows.append([f"baseline {k} (alone)", "-", "-", "-", "-", "-", rtt_cell(b[k]),
                     "rtt {:.2f}".format(b[k]["load1"])])
    head = ["engine", "install added", "wheels", "import s (importtime/wall)", "start s best [all]",
            "idle RSS children + driver", "2-task RTT s best/median (1st); overhead best/median", "load1 imp/idle/rtt"]
    w = [max(len(str(x[i])) for x in rows + [head]) for i in range(len(head))]
    print(" | ".join(h.ljust(w[i]) for i, h in enumerate(head)))
    print("-+-".join("-" * x for x in w))
    for row in rows:
        print(" | ".join(str(c).ljust(w[i]) for i, c in enumerate(row)))
    print()
    for name, r in res["engines"].items():
        last = r["starts"][-1]
        print(f"{name}: dashboard_url={last.get('dashboard_url')!r} /dev/shm delta={last['shm_used_delta']} "
              f"object_store={last.get('object_store_bytes')} shutdown={last['shutdown_s']:.2f}s "
              f"rtt distinct worker pids={last.get('rtt', {}).get('distinct_worker_pids')} "
              f"task OMP_NUM_THREADS={last.get('rtt', {}).get('task_OMP_NUM_THREADS')}")
        for sock in last["listening"]:
            print(f"   listen {sock['addr']:<22} {sock['proc']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
