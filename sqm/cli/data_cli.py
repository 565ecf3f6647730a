"""``sqm data``: the data home of the real datasets (:mod:`sqm.data.datahome`) on the command line.

    sqm data list                      every dataset: its files, size and state in the data home
    sqm data fetch NAME... | --all     download (from the public sources, or --mirror), verify, build, install
    sqm data verify [NAME...]          check every file's SHA-256 (exit 6 on a mismatch, naming the file)
    sqm data path [NAME]               the data home, or a dataset's folder in it
    sqm data example FOLDER            two generated party files (bank.csv, clinic.csv) to try a job on

Each takes ``--data-home DIR`` (default ``$SQM_DATA``, else ``~/sqm_data``).
"""
from __future__ import annotations

import argparse
import logging
import os

from sqm.data.datahome import ENV_MIRROR, REGISTRY, ChecksumError, data_home, dataset_info, fetch, status, verify_file
from sqm.errors import UsageError
from sqm.errors import EXIT_BAD_DATA, EXIT_ERROR

log = logging.getLogger("sqm")


def _home_parent() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--data-home", default=None, metavar="DIR",
                   help="the data home (default: $SQM_DATA, else ~/sqm_data)")
    return p


def register(sub) -> None:
    names = ", ".join(d.folder for d in REGISTRY.values())
    d = sub.add_parser("data", help="the real datasets: list, fetch, verify and locate them in the data home",
                       description=f"The real datasets ({names}) live in the data home: --data-home, else "
                                   f"$SQM_DATA, else ~/sqm_data.  Every file is checked against its SHA-256 "
                                   f"whenever it is read.")
    dsub = d.add_subparsers(dest="data_command", metavar="ACTION")
    ls = dsub.add_parser("list", parents=[_home_parent()], help="every dataset, its files, size and state",
                         description="Every dataset sqm fetches: its files, their size and whether they are in "
                                     "the data home and verified.")
    ls.set_defaults(func=run_list)
    f = dsub.add_parser("fetch", parents=[_home_parent()], help="download, verify and install datasets",
                        description="Download the missing files of each dataset from its public sources (or a "
                                    "mirror), verify every file's SHA-256, build the files made from others "
                                    "(phishing.csv, citeseer_planetoid.npz) and install them in the data home.")
    f.add_argument("names", nargs="*", metavar="NAME", help=f"datasets to fetch ({names})")
    f.add_argument("--all", action="store_true", help="fetch every dataset")
    f.add_argument("--mirror", default=None, metavar="URL",
                   help=f"a base URL (http, https or file) serving a copy of a data home, BASE/FOLDER/FILE, used "
                        f"instead of the public sources (default: ${ENV_MIRROR}, else the public sources)")
    # -q/--quiet (no progress bars): sqm's, on every command (sqm.cli.options.add_verbosity)
    f.set_defaults(func=run_fetch)
    v = dsub.add_parser("verify", parents=[_home_parent()], help="check the SHA-256 of every file",
                        description="Check every file of the named datasets (default: those in the data home) "
                                    "against the registry's SHA-256; exit 6 naming each file that differs or "
                                    "is missing.")
    v.add_argument("names", nargs="*", metavar="NAME", help="datasets to verify (default: every one present)")
    v.set_defaults(func=run_verify)
    p = dsub.add_parser("path", parents=[_home_parent()], help="the data home, or a dataset's folder in it",
                        description="Print the data home's path, or the folder of dataset NAME in it.")
    p.add_argument("name", nargs="?", default=None, metavar="NAME")
    p.set_defaults(func=run_path)
    e = dsub.add_parser("example", help="write two generated party files (bank.csv, clinic.csv) to try a job",
                        description="Write bank.csv (id, age, income, balance) and clinic.csv (id, bmi, glucose, "
                                    "systolic, outcome: a 0/1 label), generated party files of the same customers "
                                    "in different row orders, into FOLDER: the 'Your own data' tutorial "
                                    "(docs/tutorials/own-data.md) runs on them.")
    e.add_argument("folder", metavar="FOLDER", help="where to write them (made if missing; must not hold them)")
    e.add_argument("--records", type=int, default=800,
                   help="records per organisation (default 800; 70%% of them, 560, are people both hold)")
    e.set_defaults(func=run_example)
    d.set_defaults(func=lambda a: (d.print_help(), 0)[1])


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def run_list(args) -> int:
    print(f"data home: {data_home(args.data_home)}")
    rows = [("name", "files", "size", "state", "about")]
    for ds in REGISTRY.values():
        states = set(status(ds.name, args.data_home).values())
        state = ("verified" if states == {"verified"} else "missing" if states == {"missing"}
                 else "MISMATCH" if "MISMATCH" in states else "incomplete")
        rows.append((ds.folder, str(len(ds.files)), _size(sum(f.size for f in ds.files)), state, ds.about))
    widths = [max(len(r[k]) for r in rows) for k in range(4)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[4])
    return 0


def run_fetch(args) -> int:
    if not args.names and not args.all:
        raise UsageError("name the datasets to fetch, or --all")
    chosen = list(REGISTRY) if args.all else [dataset_info(n).name for n in args.names]
    for name in chosen:
        try:
            folder = fetch(name, args.data_home, progress=not args.quiet, mirror=args.mirror)
        except ChecksumError as e:
            log.error(f"sqm: {e}")
            return EXIT_BAD_DATA
        except OSError as e:
            log.error(f"sqm: {e}")
            return EXIT_ERROR
        print(f"{dataset_info(name).folder}: verified in {folder}")
    return 0


def run_verify(args) -> int:
    chosen = [dataset_info(n) for n in args.names] if args.names else list(REGISTRY.values())
    bad, checked = 0, 0
    for ds in chosen:
        folder = os.path.join(data_home(args.data_home), ds.folder)
        if not args.names and not any(os.path.isfile(os.path.join(folder, f.name)) for f in ds.files):
            continue  # never fetched: nothing to verify
        checked += 1
        for f in ds.files:
            path = os.path.join(folder, f.name)
            try:
                if not os.path.isfile(path):
                    raise FileNotFoundError(f"{path} is missing: run `sqm data fetch {ds.folder}`")
                verify_file(path, f)
                print(f"{ds.folder}/{f.name}: verified")
            except (ChecksumError, FileNotFoundError) as e:
                bad += 1
                fix = f"; delete it and run `sqm data fetch {ds.folder}`" if isinstance(e, ChecksumError) else ""
                print(f"{ds.folder}/{f.name}: {'MISMATCH' if fix else 'missing'}")
                log.error(f"sqm: {e}{fix}")
    if not checked:
        print(f"no dataset in the data home {data_home(args.data_home)}: `sqm data fetch NAME` fetches one")
    return EXIT_BAD_DATA if bad else 0


def run_path(args) -> int:
    home = data_home(args.data_home)
    print(os.path.join(home, dataset_info(args.name).folder) if args.name else home)
    return 0


def run_example(args) -> int:
    from sqm.data.example_files import write_example_files

    for path in write_example_files(args.folder, args.records):
        print(f"wrote {path}")
    return 0
