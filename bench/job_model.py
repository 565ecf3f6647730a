"""The whole job's cost model (``python -m bench job``): every process's CPU split into start, record alignment and
release by sampling the job's process tree, per-unit costs fitted on the smaller cells of a run, checked on its
larger cells, and a deployment's time predicted from them.

The split.  :class:`TreeSampler` reads every descendant process's CPU time (``/proc/PID/stat``: user + system)
every :data:`SAMPLE_SECONDS`.  Each party reports when its job was agreed (``timeline["agreed"]``) and how long its
``agree`` phase took (reading its ids, the schemas, the record alignment and the plan); a party's CPU at those two
instants, interpolated from the samples, splits its process (and its local workers) into

- start: process start, imports, TLS connect, the job's agreement;
- alignment: the ``agree`` phase (the PSI, with the ids' reading and the plan on either side of it);
- release: the rest (reading, rounding, noising and sharing the rows, the exchange, the Gram on shares, the
  opening, the components, exit).

The bytes a party sends are its transport's count for the whole job (not split by phase).

The model.  Per client count n and per role (the server; the busiest client), with N ids per client and
m = overlap x N records in common, at the run's column count d:

    alignment CPU = A0 + a x N          release CPU = R0 + r x m          start CPU = S (all processes)
    bytes sent by the busiest party = b x N

fitted by least squares on every cell but the largest of that n (:func:`fit`), and checked (:func:`check`) at the
largest: the predicted CPU seconds of all processes (start, alignment, release, whole job) against the measured,
within :data:`TOLERANCE`; wall time too, from a line fitted the same way, to read where the machine was idle.
Where a check misses, :func:`check` names the term: the phase with the largest error and its per-unit cost
fitted against the one the checked cell alone shows.

The prediction (:func:`predict`) for N ids per client on C cores per party, W = C local workers per party (the
PSI's CPU work on W local processes, the release on W shard workers), a link of L Gbit/s per party:

    alignment wall = start wall + W x worker start / C + max_role(A0) + max_role(a x N) / C
    release wall   = max_role(R0 + r x m) / C
    transfer       = b x N / L

Assumptions (:data:`ASSUMPTIONS`, printed with every prediction): the per-id and per-record work divides evenly
over the W workers (the ids bucketed by a keyed hash, the records in shards), each worker on a core of its own;
the fixed costs do not (they are paid once per party, plus a worker's start per worker); compute and transfer do
not overlap (an upper bound); the columns are the run's (the per-record cost is measured at d columns, not scaled).
"""
from __future__ import annotations

import os
import threading
import time

SAMPLE_SECONDS = 0.05
RESCAN_SECONDS = 0.2
TOLERANCE = 0.20
CLK_TCK = os.sysconf("SC_CLK_TCK")
PHASES = ("start", "alignment", "release")


# ------------------------------------------------------------------------------------------- the process tree
def _stat(pid: int):
    """(parent pid, CPU seconds, start time in clock ticks since boot) of ``pid``, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rfind(")") + 2:].split()
    return int(rest[1]), (int(rest[11]) + int(rest[12])) / CLK_TCK, int(rest[19])


def descendants(root: int) -> set[int]:
    """Every living process under ``root`` (children, theirs, ...)."""
    parent = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                parent[int(name)] = st[0]
    out, frontier = set(), {root}
    while frontier:
        frontier = {p for p, q in parent.items() if q in frontier and p not in out}
        out |= frontier
    return out


class TreeSampler:
    """A thread that samples every descendant of this process: per pid its parent, start tick and a series of
    (time.time(), CPU seconds).  Its own CPU seconds (``cpu_seconds``) are reported so that the
    launcher's share of a measured run can leave them out."""

    def __init__(self, interval: float = SAMPLE_SECONDS):
        self.interval, self.root = interval, os.getpid()
        self.series: dict[int, list[tuple[float, float]]] = {}
        self.parent: dict[int, int] = {}
        self.started: dict[int, int] = {}
        self.cpu_seconds = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _loop(self):
        pids: set[int] = set()
        rescan = 0.0
        while True:
            now = time.monotonic()
            if now >= rescan:
                pids = descendants(self.root) | set(self.series)
                rescan = now + RESCAN_SECONDS
            self.sample(pids)
            if self._stop.wait(self.interval):
                break
        self.sample(pids)
        self.cpu_seconds = time.thread_time()

    def sample(self, pids):
        t = time.time()
        for pid in list(pids):
            st = _stat(pid)
            if st is None:
                continue
            self.parent.setdefault(pid, st[0])
            self.started.setdefault(pid, st[2])
            self.series.setdefault(pid, []).append((t, st[1]))

    def groups(self, count: int) -> list[list[int]] | None:
        """The pids of each of ``count`` parties: this process's ``count`` children that used the most CPU (a
        helper such as multiprocessing's resource tracker uses next to none), in order of start (the launcher
        spawns the server first, then client 1, ...), each with its own descendants; None with fewer children."""
        top = [p for p, q in self.parent.items() if q == self.root]
        if len(top) < count:
            return None
        top = sorted(top, key=lambda p: self.series[p][-1][1], reverse=True)[:count]
        top.sort(key=lambda p: (self.started[p], p))
        out = []
        for p in top:
            mine = {p}
            grew = True
            while grew:
                more = {c for c, q in self.parent.items() if q in mine and c not in mine}
                grew, mine = bool(more), mine | more
            out.append(sorted(mine))
        return out

    def at(self, pids, when: float) -> float:
        """The CPU seconds of ``pids`` together at time ``when`` (time.time()), each pid's series interpolated
        (its first value before it, its last after it)."""
        import numpy as np

        cpu = 0.0
        for p in pids:
            s = self.series.get(p)
            if s:
                cpu += float(np.interp(when, [x[0] for x in s], [x[1] for x in s]))
        return cpu

    def last(self, pids) -> float:
        return sum(self.series[p][-1][1] for p in pids if self.series.get(p))


def split(sampler: TreeSampler, records: list[dict], total_cpu: float | None = None) -> dict | None:
    """Per party (server first) its CPU seconds in each of :data:`PHASES` and the bytes it sent (the whole job's:
    its transport counts them per job), the job's CPU and wall seconds in each phase (with ``total_cpu``, the
    run's measured CPU, the start is the rest: the launcher's and the exits' too); None where the process tree
    did not match the records (nothing to attribute)."""
    groups = sampler.groups(len(records))
    if groups is None:
        return None
    parties = []
    for i, (pids, r) in enumerate(zip(groups, records, strict=True)):
        tl, ph = r.get("timeline", {}), r.get("phases", {})
        if "agreed" not in tl or "agree" not in ph:
            return None
        t_start, t_align = tl["agreed"], tl["agreed"] + float(ph["agree"])
        c0, c1 = sampler.at(pids, t_start), sampler.at(pids, t_align)
        # the last sample may precede the party's last work: its own count at the end, with its workers' last
        c2 = max(sampler.last(pids), float(r.get("cpu_seconds", 0.0)) + sampler.last(pids[1:]))
        parties.append(dict(process="server" if i == 0 else f"client {i}", processes=len(pids),
                            cpu={"start": c0, "alignment": c1 - c0, "release": max(c2 - c1, 0.0)},
                            bytes_sent=int(r.get("bytes_sent", 0))))
    tls = [r["timeline"] for r in records]
    agreed = max(t["agreed"] for t in tls)
    aligned = max(t["agreed"] + float(r["phases"]["agree"]) for t, r in zip(tls, records, strict=True))
    end = max(t.get("exited") or t.get("finished") or aligned for t in tls)
    wall = {"start": agreed - min(t.get("spawned", t["started"]) for t in tls), "alignment": aligned - agreed,
            "release": end - aligned}
    cpu = {p: sum(q["cpu"][p] for q in parties) for p in PHASES}
    if total_cpu is not None:  # what no party's samples hold (the launcher, the exits) counts as start
        cpu["start"] = total_cpu - cpu["alignment"] - cpu["release"]
    return dict(parties=parties, wall=wall, cpu=cpu)


# ---------------------------------------------------------------------------------------------- the model
def cell_figures(run: dict) -> dict | None:
    """A run of ours reduced to the model's quantities (None without a split): per phase the CPU seconds of all
    processes, the server's and the busiest client's, the busiest party's bytes, and the wall seconds."""
    s = run.get("split")
    if not s:
        return None
    parties = s["parties"]
    out = dict(clients=run["clients"], rows=run["rows"], cols=run["cols"], records=run["intersection"],
               load_1min=run["load_1min"], processes=sum(p["processes"] for p in parties),
               job_cpu=run["cpu_seconds"], job_wall=run["wall_seconds"],
               job_bytes=max(p["bytes_sent"] for p in parties))
    for ph in PHASES:
        out[f"{ph}_cpu"] = s["cpu"][ph]
        out[f"{ph}_cpu_server"] = parties[0]["cpu"][ph]
        out[f"{ph}_cpu_client"] = max(p["cpu"][ph] for p in parties[1:])
        out[f"{ph}_wall"] = s["wall"][ph]
    out["start_wall"] = out["job_wall"] - out["alignment_wall"] - out["release_wall"]  # the launcher's too
    return out


def _line(x, y) -> tuple[float, float]:
    """Least squares y = a + b x (through the one point's origin when there is one point)."""
    import numpy as np

    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(set(x.tolist())) < 2:
        return 0.0, float(np.mean(y / x))
    b, a = np.polyfit(x, y, 1)
    return float(a), float(b)


UNIT = {"alignment": "rows", "release": "records"}  # what each phase's per-unit cost is per
FITTED = [f"{ph}_{k}" for ph in ("alignment", "release") for k in ("cpu", "cpu_server", "cpu_client", "wall")]


def fit(cells: list[dict]) -> dict:
    """Per client count: every quantity of :data:`FITTED` as fixed + per-unit x (ids per client for the
    alignment, records in common for the release), the start's CPU and wall (means), and the bytes per id and
    per record (the busiest party's); from ``cells`` (:func:`cell_figures`)."""
    import numpy as np

    model = {}
    for n in sorted({c["clients"] for c in cells}):
        mine = [c for c in cells if c["clients"] == n]
        m = dict(clients=n, cols=mine[0]["cols"], fitted_rows=sorted({c["rows"] for c in mine}),
                 processes=mine[0]["processes"],
                 start_cpu=float(np.mean([c["start_cpu"] for c in mine])),
                 start_wall=float(np.mean([c["start_wall"] for c in mine])))
        for q in FITTED:
            unit = UNIT[q.split("_")[0]]
            m[q] = dict(zip(("fixed", "per_unit"), _line([c[unit] for c in mine], [c[q] for c in mine]), strict=True))
        m["job_bytes_per_row"] = float(np.sum([c["job_bytes"] for c in mine]) / np.sum([c["rows"] for c in mine]))
        model[n] = m
    return model


def _value(term: dict, x: float) -> float:
    return term["fixed"] + term["per_unit"] * x


def check(model: dict, cells: list[dict]) -> list[dict]:
    """At each cell: predicted against measured CPU seconds of all processes (start, alignment, release, the whole
    job) and wall seconds (alignment, release, whole job), with the relative error and whether it lies within
    :data:`TOLERANCE`; where a check of the job misses, ``wrong_term`` names the phase that carries most of the
    error and the per-unit cost the cell alone shows against the fitted one."""
    out = []
    for c in cells:
        m = model[c["clients"]]
        pred = {"start": m["start_cpu"], "alignment": _value(m["alignment_cpu"], c["rows"]),
                "release": _value(m["release_cpu"], c["records"])}
        measured = {ph: c[f"{ph}_cpu"] for ph in PHASES}
        pairs = [(f"{ph} CPU", pred[ph], measured[ph]) for ph in PHASES]
        pairs.append(("job CPU", sum(pred.values()), c["job_cpu"]))
        wall = {"start": m["start_wall"], "alignment": _value(m["alignment_wall"], c["rows"]),
                "release": _value(m["release_wall"], c["records"])}
        pairs += [(f"{ph} wall", wall[ph], c[f"{ph}_wall"]) for ph in ("alignment", "release")]
        pairs.append(("job wall", sum(wall.values()), c["job_wall"]))
        for what, p, y in pairs:
            err = (p - y) / y if y else float("inf")
            row = dict(clients=c["clients"], rows=c["rows"], cols=c["cols"], check=what, predicted=p, measured=y,
                       rel_error=err, within=abs(err) <= TOLERANCE, load_1min=c["load_1min"])
            if not row["within"]:
                kind = "cpu" if what.endswith("CPU") else "wall"
                phase = what.split()[0]
                row["wrong_term"] = wrong_term(m, c, kind, pred if kind == "cpu" else wall,
                                               measured if kind == "cpu" else {ph: c[f"{ph}_wall"] for ph in PHASES},
                                               None if phase == "job" else phase)
            out.append(row)
    return out


def wrong_term(m: dict, c: dict, kind: str, pred: dict, measured: dict, phase: str | None = None) -> str:
    """The term off: ``phase``'s, or (for the whole job) the phase whose prediction is furthest off; its per-unit
    cost fitted against what the cell shows beyond the fitted fixed part."""
    ph = phase or max(("alignment", "release"), key=lambda p: abs(pred[p] - measured[p]))
    if ph == "start" or (phase is None and abs(pred["start"] - measured["start"]) > abs(pred[ph] - measured[ph])):
        return f"the start ({kind}): {pred['start']:.2f} s fitted, {measured['start']:.2f} s here"
    term = m[f"{ph}_{kind}"]
    unit = UNIT[ph]
    here = (measured[ph] - term["fixed"]) / c[unit]
    return (f"the {ph}'s per-{unit[:-1]} {kind} cost: {term['per_unit'] * 1e6:.2f} us fitted "
            f"(fixed {term['fixed']:.2f} s), {here * 1e6:.2f} us at this cell")


def predict(model: dict, clients: int, ids: int, overlap: float, cores: int, link_gbps: float,
            worker_start_cpu: float) -> dict:
    """A deployment's alignment and release for ``ids`` per client, ``cores`` per party (as many local workers,
    each on a core), ``link_gbps`` per party; the terms as the module docstring states them."""
    m = model[clients]
    records = overlap * ids
    link = link_gbps * 1e9 / 8
    align_cpu = max(m["alignment_cpu_server"]["per_unit"], m["alignment_cpu_client"]["per_unit"]) * ids
    rel_cpu = max(_value(m["release_cpu_server"], records), _value(m["release_cpu_client"], records))
    workers = cores  # one local worker per core; their starts' CPU spread over the cores
    fixed_align = max(m["alignment_cpu_server"]["fixed"], m["alignment_cpu_client"]["fixed"])
    a = dict(fixed_s=m["start_wall"] + worker_start_cpu * workers / cores + fixed_align,
             compute_s=align_cpu / cores, cpu_s_per_party=align_cpu)
    r = dict(compute_s=rel_cpu / cores, cpu_s_per_party=rel_cpu)
    a["seconds"] = a["fixed_s"] + a["compute_s"]
    r["seconds"] = r["compute_s"]
    transfer = m["job_bytes_per_row"] * ids / link
    return dict(clients=clients, ids=ids, records=int(records), cols=m["cols"], cores=cores, workers=workers,
                link_gbps=link_gbps, alignment=a, release=r, transfer_s=transfer,
                seconds=a["seconds"] + r["seconds"] + transfer)


ASSUMPTIONS = ("each party on its own host with C cores and C local workers (the PSI's CPU work on C processes, the "
               "release on C shard workers), the per-id and per-record work divided evenly among them, a core each; "
               "the fixed costs once per party, plus a worker's start (CPU) per worker spread over the cores; "
               "compute and transfer summed (no overlap: an upper bound); the busiest party's bytes (the whole "
               "job's) over its link; the columns the run's; the ids in common the run's fraction; the per-unit "
               "costs those of this machine's cores")


# ----------------------------------------------------------------------------------------------- the peer
def peer_feasible(done: list[dict], rows: int, clients: int, budget_s: float, mem_bytes: int) -> tuple[bool, str]:
    """Whether the peer's Gram at ``rows`` per client fits this machine: its peak memory (all nodes together) and
    CPU seconds extrapolated in the rows from the peer Gram runs so far with the same clients (``done``: rows with
    ``rows``, ``gram_cpu_seconds``, ``gram_max_rss_bytes``; on the line through the two largest, or in proportion
    to the one), against ``mem_bytes`` (the memory available, at most 60% of it) and ``budget_s`` CPU seconds."""
    base = [d for d in done if d.get("gram_cpu_seconds") is not None and d["clients"] == clients]
    if not base:
        return True, "no smaller peer run to extrapolate from"
    by_rows = {d["rows"]: d for d in sorted(base, key=lambda d: d["cpu_seconds"], reverse=True)}
    sizes = sorted(by_rows)[-2:]
    pts = [(x, sum(by_rows[x]["gram_max_rss_bytes"]), by_rows[x]["gram_cpu_seconds"]) for x in sizes]

    def at(k: int) -> float:
        if len(pts) == 1:
            return pts[0][k] * rows / pts[0][0]
        (x0, *a), (x1, *b) = pts
        return a[k - 1] + (b[k - 1] - a[k - 1]) * (rows - x0) / (x1 - x0)

    rss, cpu = at(1), at(2)
    why = (f"extrapolated from {', '.join(f'{x:,}' for x in sizes)} rows per client ("
           f"{', '.join(f'{p[1] / 2**30:.1f} GiB peak over its 3 nodes and {p[2]:.0f} CPU-s' for p in pts)}): "
           f"{rss / 2**30:.1f} GiB and {cpu:.0f} CPU-s at {rows:,}")
    if rss > 0.6 * mem_bytes:
        return False, f"SPU's Gram would not fit: {why}, over 60% of the {mem_bytes / 2**30:.1f} GiB available"
    if cpu > budget_s:
        return False, f"SPU's Gram over the peer budget: {why}, over --peer-budget {budget_s:.0f} CPU-s"
    return True, why


def mem_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
