"""The command-line option groups every ``sqm`` command shares, as argparse parent parsers.

One definition per flag, so flags cannot drift between commands::

    p = sub.add_parser("pca", parents=[options.privacy(), options.runtime(), options.job(HELP), options.output()])

- :func:`privacy`: ``--epsilon`` ``--delta`` (a command may choose its defaults and epsilon's meaning);
- :func:`runtime`: ``--backend`` (``mpyc``, the default everywhere: real party processes; ``plain``: the
  in-process simulation), ``--timeout``, ``--seed``, ``--insecure-reproducible``;
- :func:`job`: the job-file options (``--job``, ``--index``, ``--data-file``, ``--ssl-dir``, ``--connect-timeout``,
  ``--idle-timeout``, ``--insecure-plaintext``) and this party's privacy-budget ledger (``--ledger``,
  ``--ledger-dataset``, ``--budget``, ``--max-alignments``, ``--no-ledger``);
- :func:`output`: ``--json``;
- :func:`add_verbosity`: ``-v/--verbose`` and ``-q/--quiet``, which ``sqm`` adds to itself and to every
  subcommand (:func:`sqm.cli.command.build_parser`), so they work before and after the subcommand's name;
  :func:`log_level` turns them into the level :func:`sqm.mpc.net.logs.configure` shows.

:func:`check_mode` is the one check that an option given on the command line applies in the chosen mode
(local comparison or ``--job``): an option the mode does not use is an error naming it, never ignored.

Every command's data option is ``--data`` (a file or folder) and a learning rate is ``--learning-rate``;
``-k`` is not used (it meant components in one command and a weight bound in another).
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from sqm.framework.ledger_guard import DEFAULT_MAX_ALIGNMENTS
from sqm.mechanism.params import DELTA, EPSILON
from sqm.mpc import BACKENDS  # noqa: F401  (the CLI choices: the runtime's runners)
from sqm.errors import UsageError
from sqm.framework.alignment_policy import DEFAULT_MAX_SET_RATIO, check_max_set_ratio

if TYPE_CHECKING:
    from sqm.framework.tables import PartyTable

DEFAULT_BACKEND = "mpyc"

OWN_DATA_EPILOG = ("Your own data: the tutorial \"Your own data\" (docs/tutorials/own-data.md) takes two CSV or "
                   "Parquet files (one per "
                   "organisation) to a PCA and a logistic-regression result: party files, the job file and its "
                   "public column ranges (sqm pca --propose-bounds FILE), --drop-columns, the label column, gamma, "
                   "epsilon and what each printed figure means.  `sqm data example FOLDER` writes two party files "
                   "to try it on.")


def _parent() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(add_help=False)


def privacy(epsilon: float = EPSILON.default, delta: float = DELTA.default,
            epsilon_help: str = "server-observed epsilon target") -> argparse.ArgumentParser:
    p = _parent()
    g = p.add_argument_group("privacy")
    g.add_argument("--epsilon", type=float, default=epsilon, help=f"{epsilon_help} (default {epsilon:g})")
    g.add_argument("--delta", type=float, default=delta, help=f"delta (default {delta:g})")
    return p


def runtime() -> argparse.ArgumentParser:
    p = _parent()
    g = p.add_argument_group("runtime")
    g.add_argument("--backend", default=DEFAULT_BACKEND, choices=BACKENDS,
                   help="'mpyc' (default): real MPyC party processes over loopback; 'plain': the in-process "
                        "SIMULATION of the same party programs (for sweeps)")
    g.add_argument("--timeout", type=float, default=3600.0,
                   help="seconds before a multi-party run is abandoned (default 3600)")
    g.add_argument("--seed", type=int, default=None,
                   help="seed for reproducible experiments (default: OS entropy); recorded as secure_mode false. "
                        "With --job it is refused unless --insecure-reproducible is given")
    g.add_argument("--insecure-reproducible", action="store_true",
                   help="with --job and --seed: allow a seeded job (each party derives its own seed from the "
                        "seed on its own command line; nothing is sent).  INSECURE: whoever knows the seed can "
                        "regenerate every party's noise (a WARNING is printed, the JSON says secure_mode false)")
    return p


def budget(text: str) -> tuple[float, float]:
    """``--budget EPS,DELTA``: a dataset's total (epsilon, delta)."""
    parts = str(text).split(",")
    try:
        eps, delta = (float(v) for v in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--budget needs EPS,DELTA (e.g. 3,1e-5), got {text!r}") from None
    from sqm.mechanism.validation import check_param

    try:
        check_param("epsilon", eps, "--budget's epsilon")
        check_param("delta", delta, "--budget's delta")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return eps, delta


def alignment_cap(text: str) -> int | None:
    """``--max-alignments N``: an integer >= 0 (0: no cap, None)."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"--max-alignments needs an integer >= 0 (0: no cap), got {text!r}")
    return n or None


def columns(text: str) -> tuple[str, ...]:
    """``--drop-columns a,b``: column names, comma-separated, none empty."""
    names = tuple(c.strip() for c in str(text).split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"need column names separated by commas, got {text!r}")
    return names


def addresses(text: str) -> tuple[str, ...]:
    """``--worker-addresses h:p,h:p``: addresses, comma-separated, none empty (checked further by the job)."""
    out = tuple(a.strip() for a in str(text).split(","))
    if not all(out):
        raise argparse.ArgumentTypeError(f"need host:port addresses separated by commas, got {text!r}")
    return out


def job(job_help: str = "job file (JSON: parties' addresses, party 0 the server, and each client's CSV; see "
                        "sqm/framework/spec.py)") -> argparse.ArgumentParser:
    p = _parent()
    g = p.add_argument_group("job file (real multi-party run, each party reads only its own file)")
    g.add_argument("--job", default=None, help=job_help)
    g.add_argument("--index", type=int, default=None,
                   help="with --job: start only this party (0 = server) here; omitted: all parties locally")
    g.add_argument("--data-file", default=None,
                   help="with --job and --index I: this party's own table (CSV or Parquet), any path on this "
                        "machine.  A party started alone takes its file from here only: it refuses a job file that "
                        "names any party's file, model, engine or worker addresses (without --index, every party "
                        "runs here and the job file's \"file\" entries, inside its folder, are used)")
    g.add_argument("--data-sql-env", default=None, metavar="VAR",
                   help="with --job --index I, instead of --data-file: this party's table from a database whose "
                        "SQLAlchemy connection string (e.g. postgresql+psycopg://user:password@host/db, "
                        "sqlite:///FILE, duckdb:///FILE) is in environment variable VAR, so no password is on a "
                        "command line; with --data-query or --data-table.  Never read from the job file (one "
                        "naming a connection string, query or credentials is refused).  Needs the [sql] extra")
    g.add_argument("--data-sql-file", default=None, metavar="PATH",
                   help="with --job --index I: as --data-sql-env, the connection string read from this file "
                        "(readable by this party's operator only)")
    g.add_argument("--data-sql", default=None, metavar="URL",
                   help="with --job --index I: as --data-sql-env, the connection string itself (a password in it "
                        "shows in the process list: prefer --data-sql-env or --data-sql-file)")
    g.add_argument("--data-query", default=None, metavar="SQL",
                   help="with --data-sql*: the query whose rows are this party's records (the id column and numeric "
                        "feature columns, checked as a file is); ORDER BY the id column to read it in batches, in "
                        "bounded memory")
    g.add_argument("--data-table", default=None, metavar="NAME",
                   help="with --data-sql*: this table (NAME or SCHEMA.NAME) is this party's records, read "
                        "ORDER BY the id column")
    g.add_argument("--engine", default=None, metavar="ADDRESS",
                   help="with --job --index I, in a job whose parties run shard workers (\"workers\"): this party's "
                        "own Dask scheduler, e.g. tcp://10.0.0.5:8786, which runs its workers (default: local "
                        "processes).  It gets this party's records and programs: name only a cluster of your own. "
                        "Never read from the job file")
    g.add_argument("--worker-addresses", type=addresses, default=None, metavar="HOST:PORT[,...]",
                   help="with --job --index I, in a job with shard workers: where this party's workers listen, one "
                        "per shard (default: the ports after its own address); announced to the other parties "
                        "over the job's authenticated session.  Never read from the job file")
    g.add_argument("--ssl-dir", default=None,
                   help="with --job --index: mutually authenticated TLS between parties, keys from this folder "
                        "(each party's own key: sqm keys request --job NAME); needed for parties started one by one, "
                        "over loopback too (without --index the launcher makes per-job keys itself)")
    g.add_argument("--connect-timeout", type=float, default=60.0,
                   help="with --job: seconds for every party to connect (default 60)")
    g.add_argument("--idle-timeout", type=float, default=None,
                   help="with --job: seconds without any bytes from a peer whose message is awaited before the "
                        "job is aborted naming it (default: the runtime's, 25)")
    g.add_argument("--progress-timeout", type=float, default=None,
                   help="with --job: seconds a peer whose message is awaited may keep sending heartbeats without "
                        "sending what the step expects before the job is aborted naming it (default: the "
                        "runtime's, 20; a frame in transit gets its size at 1 MiB/s more; 0: off)")
    g.add_argument("--insecure-plaintext", action="store_true",
                   help="with --job: INSECURE: plain TCP, no peer authentication (no --ssl-dir): between hosts "
                        "anyone on the path can read the shares; on one host another local user can connect as "
                        "a party")
    g.add_argument("--drop-columns", type=columns, default=(), metavar="COL[,COL...]",
                   help="with --job: columns of the party files this job leaves out (e.g. the label column for "
                        "sqm pca); every party gives the same; a name no client holds is refused")
    g.add_argument("--min-intersection", type=int, default=None, metavar="N",
                   help="with --job: the fewest records in common (the clients' private set intersection) "
                        "the job runs on; a smaller intersection is refused before any share of data is sent "
                        "(default: the job file's \"min_intersection\", else 100); every party gives the same")
    g.add_argument("--max-set-ratio", type=float, default=None, metavar="R",
                   help="with --job: this party's size policy for the record alignment: it refuses, naming the "
                        "party, before any id is sent, a peer whose declared set holds more than R times its own "
                        "(a party holding no set, e.g. the server of a PCA job: a largest set above R times the "
                        "smallest); sets above 2^32 - 1 are always refused.  Each party sets its own (not agreed; "
                        f"default {DEFAULT_MAX_SET_RATIO:g})")
    g.add_argument("--ledger", default=None, metavar="PATH",
                   help="with --job: the privacy-budget ledger (SQLite, sqm.mechanism.ledger) that records every "
                        "release per dataset and refuses a job over the dataset's budget before any party sends a "
                        "share.  A client started alone (--index I > 0) keeps one by default: the data owner "
                        "charges each release of its records (their epsilon against the server) to its own "
                        "dataset (--ledger-dataset), in ledger.sqlite in $SQM_DATA (default ~/sqm_data) unless PATH "
                        "is given.  At the server, or for a whole job on one host, a ledger is kept with --ledger, "
                        "--budget or --ledger-dataset only")
    g.add_argument("--ledger-dataset", default=None, metavar="NAME",
                   help="with --job: the dataset this party's ledger charges.  At a client, its own name for its "
                        "file's records, bound to the file's content (SHA-256 of its bytes): the same file always "
                        "charges the same dataset whatever a job file names, a file bound to another name is "
                        "refused, and a name bound to another file needs sqm budget bind first (default: the "
                        "name the file is bound to, else 'sha256:' and 16 hex digits of its digest).  At the "
                        "server: default the job file's \"dataset\", else its \"name\"")
    g.add_argument("--budget", type=budget, default=None, metavar="EPS,DELTA",
                   help="with --job: the dataset's total (epsilon, delta) in this party's ledger, set once per "
                        "dataset (a dataset without one refuses every job: a client's first job needs it)")
    g.add_argument("--max-alignments", type=alignment_cap, default=DEFAULT_MAX_ALIGNMENTS, metavar="N",
                   help=f"with --job --index I > 0: the most record alignments (private set intersections, one per "
                        f"job, refused ones included) this client runs on its dataset; the next job is refused "
                        f"before the PSI (default {DEFAULT_MAX_ALIGNMENTS}; 0: no cap).  Each alignment shows a "
                        f"client's peers the set sizes, so reruns that swap records probe membership: the cap "
                        f"bounds them.  sqm budget show lists the count")
    g.add_argument("--no-ledger", action="store_true",
                   help="with --job --index I > 0: keep no privacy-budget ledger at this client (its operator "
                        "accounts elsewhere; it then counts no alignment and, in sqm score, can check no model "
                        "and refuses the job)")
    return p


def output() -> argparse.ArgumentParser:
    p = _parent()
    g = p.add_argument_group("output")
    g.add_argument("--json", default=None, metavar="FILE", help="write the results to this JSON file")
    return p


VERBOSITY = ("verbose", "quiet")  # argparse dests of -v and -q; a parser with subcommands gets suffixed ones


def add_verbosity(parser: argparse.ArgumentParser, suffix: str = "") -> None:
    """``-v/--verbose`` (repeatable: -v INFO, -vv DEBUG) and ``-q/--quiet`` (no progress bars, warnings only;
    -qq errors only).  ``suffix`` gives a parser that has subcommands its own dests (``verbose{suffix}``), since
    a subcommand's defaults overwrite its parent's values: :func:`log_level` adds them all up."""
    g = parser.add_argument_group("messages")
    g.add_argument("-v", "--verbose", action="count", default=0, dest="verbose" + suffix,
                   help="more messages on stderr: -v progress of the parties and runtime (INFO), -vv DEBUG")
    g.add_argument("-q", "--quiet", action="count", default=0, dest="quiet" + suffix,
                   help="for scripts: no progress bars and no announcements, warnings and errors only; -qq errors "
                        "only")


def log_level(args) -> int:
    """The logging level -v/-q chose (default NOTICE: each party's announcement of the job it is about to run,
    warnings, errors and progress bars; -q WARNING: warnings and errors only, no bars; -qq ERROR); sets
    ``args.verbose`` and ``args.quiet`` to the totals over every position they were given in."""
    import logging

    from sqm.mpc.net.logs import NOTICE

    for name in VERBOSITY:
        setattr(args, name, sum(int(v or 0) for k, v in vars(args).items() if k.startswith(name)))
    if args.verbose:
        return logging.INFO if args.verbose == 1 else logging.DEBUG
    return logging.ERROR if args.quiet >= 2 else logging.WARNING if args.quiet else NOTICE


def runtime_options(args) -> dict | None:
    """The backend's options from :func:`runtime` (``--timeout`` bounds the real party processes)."""
    return {"timeout": args.timeout} if args.backend == "mpyc" else None


def job_run_options(args) -> dict:
    """:func:`sqm.framework.runners.run_job`'s keyword arguments from the options of :func:`job` and :func:`runtime`."""
    from sqm.framework.sql_tables import from_options

    data_sql = from_options(getattr(args, "data_sql", None), getattr(args, "data_sql_env", None),
                            getattr(args, "data_sql_file", None), getattr(args, "data_query", None),
                            getattr(args, "data_table", None))
    return dict(timeout=args.timeout, ssl_dir=args.ssl_dir, data_file=args.data_file, data_sql=data_sql,
                connect_timeout=args.connect_timeout, insecure_plaintext=args.insecure_plaintext,
                idle_timeout=args.idle_timeout, progress_timeout=args.progress_timeout,
                backend=getattr(args, "backend", DEFAULT_BACKEND),
                ledger=args.ledger, budget=args.budget, ledger_dataset=getattr(args, "ledger_dataset", None),
                max_alignments=getattr(args, "max_alignments", DEFAULT_MAX_ALIGNMENTS),
                client_ledger=getattr(args, "index", None) is not None and not getattr(args, "no_ledger", False),
                engine=getattr(args, "engine", None), worker_addresses=getattr(args, "worker_addresses", None),
                max_set_ratio=(DEFAULT_MAX_SET_RATIO if getattr(args, "max_set_ratio", None) is None
                               else check_max_set_ratio(args.max_set_ratio)))


# The options of :func:`job` (and --insecure-reproducible) have a meaning with --job only.
JOB_ONLY = ("job", "index", "data_file", "engine", "worker_addresses", "ssl_dir", "connect_timeout", "idle_timeout",
            "progress_timeout", "insecure_plaintext",
            "ledger", "ledger_dataset", "max_alignments", "budget", "no_ledger", "insecure_reproducible",
            "drop_columns", "min_intersection", "max_set_ratio",
            "data_sql", "data_sql_env", "data_sql_file", "data_query", "data_table")
MODE_WORDS = {"job": "with --job (the job file says which parties hold which columns and records)",
              "local": "without --job (a local comparison on one machine)",
              "propose": "with --propose-bounds (it only reads a party's table and prints proposed ranges)"}


def flag(parser: argparse.ArgumentParser, dest: str) -> str:
    """The command-line spelling of option ``dest`` (its longest flag)."""
    for a in parser._actions:
        if a.dest == dest and a.option_strings:
            return max(a.option_strings, key=len)
    return "--" + dest.replace("_", "-")


def check_mode(args, parser: argparse.ArgumentParser, mode: str, only: dict[str, tuple[str, ...]]) -> None:
    """Refuse options that do not apply in ``mode``: ``only`` maps each mode to the options (argparse dests)
    used in that mode alone; one given (a value other than its default, ``parser.get_default``) while
    running another mode is a ValueError naming every such option and the mode.  Options no mode lists
    apply everywhere."""
    if mode not in only:
        raise UsageError(f"unknown mode {mode!r}; modes: {sorted(only)}")
    mine = set(only[mode])
    wrong = sorted({d for m, dests in only.items() if m != mode for d in dests
                    if d not in mine and hasattr(args, d) and getattr(args, d) != parser.get_default(d)})
    if wrong:
        names = ", ".join(flag(parser, d) for d in wrong)
        raise UsageError(f"{names} {'does' if len(wrong) == 1 else 'do'} not apply "
                         f"{MODE_WORDS.get(mode, 'in mode ' + mode)}: remove {'it' if len(wrong) == 1 else 'them'}")


def own_table(parser: argparse.ArgumentParser, data_help: str, id_also: str = "") -> None:
    """``--data FILE`` (a user's own CSV/Parquet table: ``data_help`` says what the command does with it) and
    ``--id-column`` (read by :func:`sqm.cli.options.read_user_table`; ``id_also``: other options it serves)."""
    parser.add_argument("--data", default=None, metavar="FILE",
                        help="your own table (CSV, or Parquet by its .parquet extension)" + data_help)
    parser.add_argument("--id-column", default=None,
                        help=f"with --data FILE{id_also}: the column holding record ids, left out of the features "
                             f"(default: a column named 'id', if any)")


def declare_task(parser: argparse.ArgumentParser, dests) -> None:
    """Declare which of ``parser``'s options are the job's task parameters (what a job file's ``task`` block may
    set, :func:`sqm.cli.job_cli.apply_task_block`), each with its option's type to read the file's value."""
    types = {a.dest: a.type for a in parser._actions}
    missing = [d for d in dests if d not in types]
    if missing:
        raise UsageError(f"no options {missing} to declare as task parameters")
    parser.set_defaults(task_params={d: types[d] for d in dests})


def read_user_table(path, id_column: str | None = None) -> PartyTable:
    """A user's own table for a local comparison (``sqm pca --data FILE``, ``sqm logreg --data FILE``):
    ``id_column`` (default: a column named ``id``, if any) holds record ids, left out of the features (said on
    stdout); a named id column that is missing is an error."""
    import os

    if os.path.isdir(path):
        raise UsageError(f"--data {path} is a folder: give your own table (a CSV or Parquet file)")
    from sqm.framework.tables import read_table

    t = read_table(path, id_column or "id", require_id=id_column is not None, what="data file")
    if t.ids:
        print(f"(column '{id_column or 'id'}' holds record ids: left out of the features)")
    return t


def omit(parser: argparse.ArgumentParser, dests) -> argparse.ArgumentParser:
    """``parser`` (a parent of this module) without the options ``dests``, for a command in which they would do
    nothing (``sqm score``: no seed, no budget to set); the command sets their values' defaults itself."""
    for action in [a for a in parser._actions if a.dest in dests]:
        parser._remove_action(action)
        for group in parser._action_groups:
            if action in group._group_actions:
                group._group_actions.remove(action)
        for s in action.option_strings:
            parser._option_string_actions.pop(s, None)
    return parser
