"""The benchmarks pages' generated tables, made from the stored records (``docs/benchmarks/data/*.json``).

:func:`blocks` maps each generated block's name to its markdown: a table, then one line saying where its figures
came from (measured by which command on which machine at what load, or transcribed).  The four per-task tables
(:data:`TASK_TABLES`) put epsilon beside quality and time at the same epsilon and delta; each task's peers table
(:data:`PEER_TABLES`) gives the published or separately measured figures with their source in every row.
"""
from __future__ import annotations

import math

TASK_TABLES = {"pca": "pca-table", "logreg": "logreg-table", "linreg": "linreg-table", "pbm-vfl": "pbm-table"}
PEER_TABLES = {"pca": "pca-peers", "logreg": "logreg-peers", "linreg": "linreg-peers", "pbm-vfl": "pbm-peers"}
IDLE_LOAD = 1.0  # 1-minute load average before a run under which the (2-core) machine is called idle
K = 5  # the PCA tables' number of components


def table(columns: list[str], rows: list[list], align: str | None = None) -> str:
    """A markdown table; ``align`` one letter per column (l or r; default: l)."""
    align = align or "l" * len(columns)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(sep) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def fmt(x, spec: str = ".3f") -> str:
    """A figure as the tables print it: ``-`` for none, ``inf`` for an infinite epsilon."""
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if math.isinf(x):
        return "inf"
    return format(x, spec)


def eps(x) -> str:
    return fmt(x, "g")


def provenance(rec: dict) -> str:
    """One line: how the figures were obtained, by what command, on what machine, and its load."""
    if rec["how"] == "measured":
        lo, hi = rec["load_average"]
        idle = "idle" if lo < IDLE_LOAD else "shared with other work"
        by = "" if rec.get("by_hand") else " (run by `python -m bench site --refresh`)"
        line = (f"*Measured by `{rec['command']}`{by} on {rec['machine']}, "
                f"{rec['when']}; 1-minute load average {lo:g}-{hi:g} ({idle} before the runs; the runs' own "
                f"processes count).*")
    elif rec["how"] == "published":
        line = f"*The peers' figures as {rec['command']}; not measured here.*"
    else:
        line = (f"*Transcribed from the measurement notes (not re-run: too slow for `--refresh`): `{rec['command']}` "
                f"on {rec['machine']}; load: {rec['load'] or 'not recorded'}.*")
    if rec.get("note"):
        line += f" *{rec['note'][0].upper()}{rec['note'][1:]}.*"
    return line


def with_provenance(body: str, *recs: dict) -> str:
    return body + "\n\n" + "\n".join(provenance(r) for r in recs)


# ------------------------------------------------------------------------------------------------------ PCA
def pca_table(d: dict) -> str:
    util, time_ = d["pca-utility"], d["pca-time"]
    rep = util["report"]
    r = rep["results"]["digits"]
    ki = r["ks"].index(K)
    gamma = "4096.0"
    real = {row["epsilon"]: row for row in time_["report"]["rows"]}
    rows = []
    for e in rep["epsilons"]:
        key = str(float(e))
        c = r["central"][key][ki]
        t = real[e]
        rows.append([eps(e), eps(rep["delta"]), fmt(r["sqm"][key][gamma][ki] / c, ".4f"),
                     fmt(r["local"][key][ki] / c, ".3f"), fmt(t["seconds"], ".2f"), fmt(t["bytes"] / 1e6, ".1f")])
    cols = ["epsilon", "delta", f"utility: SQM / central DP, k = {K} (gamma 2^12, {rep['runs']} runs)",
            f"utility: local DP / central DP, k = {K}", "time: one release, real processes, s",
            "MB sent, all parties"]
    body = table(cols, rows, "rrrrrr")
    return with_provenance(body + f"\n\ndigits ({r['shape'][0]:,} x {r['shape'][1]}), {r['parties']} clients; "
                           f"utility is ||X V||_F^2 of the top {K} components.", util, time_)


def _peer_rows(rows: list[dict]) -> list[list]:
    return [[p["system"], p["setting"], p["epsilon"], eps(p["delta"]) if not isinstance(p["delta"], str)
             else p["delta"], p["quality"], p["time"], p["source"]] for p in rows]


PEER_COLUMNS = ["system", "setting", "epsilon", "delta", "quality", "time", "source"]


def pca_peers(d: dict) -> str:
    spu = d["peers-spu"]
    rows = _peer_rows(d["papers"]["report"]["pca"])
    for r in spu["report"]["rows"]:
        if r["shape"].startswith("195,666"):
            rows.append([r["side"], f"the secure Gram X^T X alone, {r['shape']} (KDDCUP's shape), 2 holders",
                         "no noise", "-", f"exact (max abs error {r['max_abs_error']})",
                         f"{fmt(r['seconds'], '.2f')} s end to end", "measured here: `python -m bench peers`, "
                         f"SecretFlow SPU {spu['report']['spu_version']} (see Cost and scale)"])
    return with_provenance(table(PEER_COLUMNS, rows), d["papers"], spu)


# ------------------------------------------------------------------------------------------ logistic regression
def logreg_table(d: dict) -> str:
    rec = d["logreg"]
    rows = [[eps(r["epsilon"]), eps(r["delta"]), f"{fmt(r['sqm_accuracy'])} / {fmt(r['sqm_auc'])}",
             f"{fmt(r['dpsgd_accuracy'])} / {fmt(r['dpsgd_auc'])}", fmt(r["local_accuracy"]),
             f"{fmt(r['nonprivate_accuracy'])} / {fmt(r['nonprivate_auc'])}", fmt(r["seconds"], ".2f"),
             f"{r['bytes']:,}"] for r in rec["report"]["rows"]]
    runs = rec["report"]["rows"][0]["runs"]
    cols = ["epsilon", "delta", f"accuracy / AUC: SQM ({runs} runs)", "DPSGD", "local DP accuracy",
            "non-private", "time: one release, real processes, s", "bytes sent"]
    body = table(cols, rows, "rrllrlrr")
    s = rec["report"]["setting"]
    return with_provenance(body + f"\n\n{s['dataset']}, {s['parties']} clients, gamma {s['gamma']:g}, every default "
                           "(the moments solver: one release).", rec)


def logreg_datasets(d: dict) -> str:
    rec = d["logreg-datasets"]
    rep = rec["report"]

    def pm(r, m):
        return (f"{fmt(r[m + '_accuracy'])} +- {fmt(r[m + '_accuracy_sd'])} / "
                f"{fmt(r[m + '_auc'])} +- {fmt(r[m + '_auc_sd'])}")
    rows = []
    for r in rep["rows"]:
        gap = r["gap_points"]
        rows.append([f"{r['dataset']} ({r['train']:,}, {r['features']})", eps(r["epsilon"]), eps(rep["delta"]),
                     pm(r, "sqm"), pm(r, "dpsgd"),
                     "-" if r["nonprivate_accuracy"] is None else
                     f"{fmt(r['nonprivate_accuracy'])} / {fmt(r['nonprivate_auc'])}",
                     f"{gap[0]:+.2f}, {gap[1]:+.2f}"])
    cols = ["data set (train n, d)", "epsilon", "delta", "accuracy / AUC: SQM", "DPSGD", "non-private",
            "DPSGD - SQM (acc, AUC points; positive: SQM behind)"]
    c = rep["sgd_cost"]
    body = table(cols, rows, "lrrllll") + (
        f"\n\n{rep['runs']} runs per cell, {rep['clients']} clients. The sgd solver's cost instead (`{c['command']}`): "
        f"{fmt(c['ms_per_iteration'], '.1f')} ms, {c['bytes_per_iteration']:,} bytes and "
        f"{c['exchanges_per_iteration']} exchanges per iteration.")
    return with_provenance(body, rec)


def logreg_peers(d: dict) -> str:
    rows = _peer_rows(d["papers"]["report"]["logreg"])
    h = d["hdp-vfl"]
    for r in h["report"]["rows"]:
        sd = f" +- {fmt(r['accuracy_sd'])}" if "accuracy_sd" in r else ""
        rows.append(["HDP-VFL re-implemented here", f"{r['dataset']}, 2 parties, {h['report']['seeds']} seeds",
                     eps(r["epsilon"]), eps(h["report"]["delta"]), f"accuracy {fmt(r['accuracy'])}{sd}"
                     + (f" ({r['note']})" if r.get("note") else ""), "-",
                     f"measured here: `{h['command']}`"])
    return with_provenance(table(PEER_COLUMNS, rows), d["papers"], h)


# ---------------------------------------------------------------------------------------- linear regression
def linreg_table(d: dict) -> str:
    rec = d["linreg"]
    rows = [[eps(r["epsilon"]), eps(r["delta"]), f"{fmt(r['sqm_r2'])} ({fmt(r['sqm_rmse'], '.1f')})",
             fmt(r["central_r2"]), fmt(r["nonprivate_r2"]), fmt(r["seconds"], ".2f"), f"{int(r['bytes']):,}"]
            for r in rec["report"]["rows"]]
    runs = rec["report"]["rows"][0]["runs"]
    cols = ["epsilon", "delta", f"R^2 (RMSE): SQM ({runs} runs)", "R^2: central DP", "R^2: non-private",
            "time: one release, real processes, s", "bytes sent"]
    body = table(cols, rows, "rrlrrrr")
    s = rec["report"]["setting"]
    return with_provenance(body + f"\n\n{s['dataset']} ({s['shape'][0]} x {s['shape'][1]}, {s['test']} held out), "
                           f"{s['parties']} clients, gamma {s['gamma']:g}, alpha "
                           f"{'from public quantities' if s.get('alpha') is None else format(s['alpha'], 'g')}.", rec)


def linreg_utility(d: dict) -> str:
    """SQM-linreg with its defaults beside AdaSSP, OLS and the mean (``python -m bench linreg-utility``)."""
    rec = d["linreg-utility"]
    rep = rec["report"]
    rows = [[r["dataset"] + (" (tuning)" if r["tuning_set"] else ""), f"{r['n_train']:,} x {r['d']}",
             eps(r["epsilon"]), f"{fmt(r['sqm_r2'])} +- {fmt(r['sqm_r2_std'])}", fmt(r["sqm_r2_min"]),
             str(r["sqm_mean_returned"]), f"{fmt(r['adassp_r2'])} +- {fmt(r['adassp_r2_std'])}",
             fmt(r["ols_r2"]), fmt(r["mean_r2"])] for r in rep["rows"]]
    cols = ["data set", "train", "epsilon", f"test R^2: SQM ({rep['rows'][0]['runs']} runs)", "SQM: worst run",
            "SQM: runs returning the mean", "AdaSSP", "OLS", "the mean"]
    verdict = (f"\n\nDelta {rep['delta']:g}. SQM within 0.05 R^2 of AdaSSP in every row: "
               f"{'yes' if rep['all_within'] else 'no'}; its mean R^2 never below the mean's (minus 0.01): "
               f"{'yes' if rep['all_not_below_mean'] else 'no'}.")
    return with_provenance(table(cols, rows, "lrrlrrlrr") + verdict, rec)


def linreg_peers(d: dict) -> str:
    return with_provenance(table(PEER_COLUMNS, _peer_rows(d["papers"]["report"]["linreg"])), d["papers"])


# --------------------------------------------------------------------------------------------------- PBM-VFL
def pbm_table(d: dict) -> str:
    rec = d["pbm-vfl"]
    rep = rec["report"]
    runs = {(r["method"], r["b"], r["beta"]): r for r in rep["runs"]}
    mpyc = {(m["b"], m["beta"], m["secure_sum"]): m for m in rep.get("mpyc", [])}
    rows = []
    npq = runs[("npq", None, None)]
    for (method, b, beta), r in runs.items():
        if method != "pbm":
            continue
        eq = runs[("ldp_eq", b, beta)]
        run = r["runs"][0]
        times = [f"{fmt(m['ms_per_iteration'], '.1f')} ({s})" for (mb, mbeta, s), m in mpyc.items()
                 if (mb, mbeta) == (b, beta)]
        rows.append([f"b {b}, beta {beta:g}", eps(float(f"{r['epsilon']:.4g}")), eps(rep["delta"]),
                     fmt(run["test_auprc"]), fmt(eq["runs"][0]["test_auprc"]),
                     fmt(run["epochs_to_target"], "d") if run["epochs_to_target"] else "not in 6",
                     ", ".join(times) or "-"])
    nrun = npq["runs"][0]
    rows.append(["NPQ (no privacy)", "inf", "-", fmt(nrun["test_auprc"]), "-", fmt(nrun["epochs_to_target"], "d"),
                 "-"])
    cols = ["setting", "epsilon (feature)", "delta", "test AUPRC: PBM-VFL", "LDP at the same epsilon",
            "epochs to train AUPRC 0.9", "time: ms per iteration, real processes (secure sum)"]
    cfg = rep["config"]
    body = table(cols, rows, "lrrrrrl") + (
        f"\n\nphishing, {', '.join(map(str, cfg['parties']))} clients, {cfg['epochs']} epochs, batch "
        f"{cfg['batch_size']}, width {cfg['hidden']}, {cfg['optimizer']}; accuracy in the simulation, time through "
        "real processes over one epoch.")
    return with_provenance(body, rec)


def pbm_digits(d: dict) -> str:
    rec = d["pbm-vfl-digits"]
    r = rec["report"]
    rows = [[eps(r["feature_epsilon"]), eps(r["delta"]), fmt(r["pbm"]), fmt(r["npq"]), fmt(r["ldp_equal"]),
             fmt(r["ldp_paper"]), f"{fmt(r['ms_per_iteration_bgw'], '.1f')} (BGW), "
             f"{fmt(r['ms_per_iteration_masked'], '.1f')} (masked)", f"{r['mb_bgw']:g}, {r['mb_masked']:g}"]]
    cols = ["epsilon (feature)", "delta", "test accuracy: PBM-VFL", "NPQ", "LDP at the same epsilon",
            "LDP (paper's variance)", "time: ms per iteration", "MB sent, all parties"]
    return with_provenance(table(cols, rows, "rrrrrrll") + f"\n\n{r['dataset']}, {r['epochs']} epochs, "
                           f"sample epsilon {eps(r['sample_epsilon'])}.", rec)


def pbm_peers(d: dict) -> str:
    return with_provenance(table(PEER_COLUMNS, _peer_rows(d["papers"]["report"]["pbm-vfl"])), d["papers"])


# ------------------------------------------------------------------------------------------------ at a glance
GLANCE_EPSILON = 1.0


def glance(d: dict) -> str:
    """One row per task at epsilon 1 (PBM-VFL: the setting whose time was measured through real processes):
    quality beside the baselines' and time at the same epsilon, each from the task's own table."""
    e = GLANCE_EPSILON
    rows = []
    rep = d["pca-utility"]["report"]
    r = rep["results"]["digits"]
    ki, key = r["ks"].index(K), str(float(e))
    t = next(x for x in d["pca-time"]["report"]["rows"] if x["epsilon"] == e)
    rows.append(["PCA", "digits", eps(e), eps(rep["delta"]),
                 f"utility {fmt(r['sqm'][key]['4096.0'][ki] / r['central'][key][ki], '.4f')} x central DP's, "
                 f"local DP {fmt(r['local'][key][ki] / r['central'][key][ki], '.3f')} x",
                 f"{fmt(t['seconds'], '.2f')} s per release"])
    x = next(x for x in d["logreg"]["report"]["rows"] if x["epsilon"] == e)
    rows.append(["logistic regression", "breast_cancer", eps(e), eps(x["delta"]),
                 f"accuracy {fmt(x['sqm_accuracy'])}; DPSGD {fmt(x['dpsgd_accuracy'])}; non-private "
                 f"{fmt(x['nonprivate_accuracy'])}", f"{fmt(x['seconds'], '.2f')} s per release"])
    x = next(x for x in d["linreg"]["report"]["rows"] if x["epsilon"] == e)
    rows.append(["linear regression", "diabetes", eps(e), eps(x["delta"]),
                 f"R^2 {fmt(x['sqm_r2'])}; central DP {fmt(x['central_r2'])}; non-private {fmt(x['nonprivate_r2'])}",
                 f"{fmt(x['seconds'], '.2f')} s per release"])
    pb = d["pbm-vfl"]["report"]
    ms = [m for m in pb.get("mpyc", []) if m["secure_sum"] == "masked"]
    runs = [x for x in pb["runs"] if x["method"] == "pbm"]
    x = next((x for x in runs if ms and (x["b"], x["beta"]) == (ms[0]["b"], ms[0]["beta"])), None) or \
        min(runs, key=lambda x: x["epsilon"])
    eq = next(y for y in pb["runs"] if y["method"] == "ldp_eq" and (y["b"], y["beta"]) == (x["b"], x["beta"]))
    npq = next(y for y in pb["runs"] if y["method"] == "npq")
    rows.append(["PBM-VFL", f"phishing, b {x['b']}, beta {x['beta']:g}", eps(float(f"{x['epsilon']:.4g}")),
                 eps(pb["delta"]), f"test AUPRC {fmt(x['runs'][0]['test_auprc'])}; LDP at the same epsilon "
                 f"{fmt(eq['runs'][0]['test_auprc'])}; NPQ {fmt(npq['runs'][0]['test_auprc'])}",
                 f"{fmt(ms[0]['ms_per_iteration'], '.1f')} ms per iteration (masked sum)" if ms else "-"])
    cols = ["task", "data", "epsilon", "delta", "quality (SQM; baselines)", "time"]
    return table(cols, rows, "llrrll") + "\n\n*From the per-task tables below, where each figure's run is named.*"


# ------------------------------------------------------------------------------------------------- the rest
def generic(name: str):
    def make(d: dict) -> str:
        rec = d[name]
        return with_provenance(table(rec["report"]["columns"], rec["report"]["rows"]), rec)
    return make


def bgw_table(d: dict) -> str:
    rec = d["bgw-cost"]
    rep = rec["report"]
    rows = [[f"2^{int(math.log2(r['gamma']))}", r.get("field_bits", "-"), fmt(r["seconds"], ".2f"),
             fmt(max(r["bytes_per_party"]) / 2 ** 20, ".1f"), fmt(r["rel_error"], ".2e")] for r in rep["rows"]]
    cols = ["gamma", "field bits", "end to end s", "MiB sent (largest party)", "relative Frobenius error"]
    shape = " x ".join(f"{n:,}" for n in rep["shape"])
    return with_provenance(table(cols, rows, "rrrrr") + f"\n\n{shape}, {rep['clients']} clients, epsilon 1 (the "
                           f"bench's); plaintext numpy X^T X of the same shape: "
                           f"{fmt(rep['plaintext_seconds'], '.4f')} s.", rec)


def scale_table(d: dict) -> str:
    rec = d["scale"]
    rep = rec["report"]
    rows = [[f"{r['rows']:,}", fmt(r["seconds"], ".2f"), fmt(max(r["party_seconds"]), ".2f"),
             ", ".join(fmt(b / 2 ** 20, ".0f") for b in r["max_rss_bytes"]),
             fmt(max(r["bytes_sent"]) / 2 ** 20, ",.0f")]
            for r in rep["rows"]]
    cols = ["records", "end to end s", "protocol s (slowest party)", "peak RSS per party, MiB (server, clients)",
            "MiB sent per client"]
    return with_provenance(table(cols, rows, "rrrlr") + f"\n\n{rep['clients']} clients, {rep['shape_cols']} columns, "
                           f"gamma {rep['gamma']}, chunks of {rep['chunk_rows']:,} records, epsilon 1.", rec)


def psi_table(d: dict) -> str:
    rec = d["psi"]
    rows = [[r["clients"], f"{r['ids']:,}", f"{r['common']:,}", fmt(r["seconds"], ".2f"),
             fmt(r["floor_seconds"], ".1f"),
             f"{r['ids_per_s_per_core']:,}", fmt(r["bytes_per_id"], ".1f"),
             ", ".join(fmt(b / 2 ** 20, ".0f") for b in r["max_rss_bytes"])] for r in rec["report"]["rows"]]
    cols = ["clients", "ids per client", "in common", "end to end s", "X25519 floor s", "ids/s/core", "bytes/id",
            "peak RSS MiB (server, clients)"]
    return with_provenance(table(cols, rows, "rrrrrrrl"), rec)


def psi_published(d: dict) -> str:
    rec = d["psi"]
    mine = [[f"this project, ECDH over X25519, {r['clients']} clients x {r['ids']:,}", fmt(r["seconds"], ".1f"), 2,
             f"{r['ids_per_s_per_core']:,}", "measured here (the table above)"]
            for r in rec["report"]["rows"] if r["ids"] == 1_000_000]
    theirs = [[p["system"], fmt(p["seconds"], "g"), p["cores"], f"{p['ids_per_s_per_core']:,}", p["source"]]
              for p in rec["report"]["published"]]
    cols = ["system", "time s", "cores", "ids/s per core", "source"]
    return table(cols, mine + theirs, "lrrrl") + "\n\n*The published figures: other hardware, 2 parties x 10^7 ids.*"


def spu_table(d: dict) -> str:
    rec = d["peers-spu"]
    rows = [[r["shape"], r["side"], fmt(r["seconds"], ".2f"), fmt(r["protocol_seconds"], ".2f"),
             fmt(r["cpu_seconds"], ".1f"), ", ".join(map(str, r["peak_mib"])), ", ".join(map(str, r["mib_sent"])),
             r["max_abs_error"]] for r in rec["report"]["rows"]]
    cols = ["shape", "side", "end to end s", "protocol s", "CPU s (all processes)", "peak RSS per process, MiB",
            "MiB sent per process", "max abs error"]
    return with_provenance(table(cols, rows, "llrrrllr") + f"\n\nGamma {rec['report']['gamma']}, SecretFlow SPU "
                           f"{rec['report']['spu_version']} in its 64-bit ring.", rec)


def hdp_table(d: dict) -> str:
    rec = d["hdp-vfl"]
    rep = rec["report"]
    rows = [[r["dataset"], eps(r["epsilon"]), eps(rep["delta"]),
             fmt(r["accuracy"]) + (f" +- {fmt(r['accuracy_sd'])}" if "accuracy_sd" in r else ""),
             fmt(rep["nonprivate_vfl"][r["dataset"]]), r.get("note", "")] for r in rep["rows"]]
    cols = ["data set", "epsilon", "delta", "test accuracy", "non-private VFL", "note"]
    return with_provenance(table(cols, rows, "lrrrrl"), rec)


MAKERS = {
    "glance": glance,
    "pca-table": pca_table, "pca-peers": pca_peers,
    "logreg-table": logreg_table, "logreg-datasets": logreg_datasets, "logreg-peers": logreg_peers,
    "linreg-table": linreg_table, "linreg-peers": linreg_peers, "linreg-utility": linreg_utility,
    "pbm-table": pbm_table, "pbm-digits": pbm_digits, "pbm-peers": pbm_peers,
    "hdp-table": hdp_table, "design-choices": generic("design-choices"),
    "bgw-table": bgw_table, "scale-table": scale_table, "scale-workers": generic("scale-workers"),
    "psi-table": psi_table, "psi-published": psi_published,
    "psi-peer": generic("psi-peer"), "psi-hidden": generic("psi-hidden"),
    "spu-table": spu_table,
}


def blocks(data: dict[str, dict]) -> dict[str, str]:
    """Every generated block's markdown, from the stored records ``data`` (by name)."""
    return {name: make(data) for name, make in MAKERS.items()}
