"""The job file's schema, declared once: every key of the file and of a party's entry, its JSON type, default and
meaning.  :func:`sqm.framework.spec.load_job` checks a file against it (:func:`check_job_keys`) before reading any
value, so a misspelt key (``"hide_membershp"``, ``"bound"``) is refused with the closest valid key instead of being
ignored, and a value of the wrong JSON type is refused naming the key and the type; the values' ranges and formats
are then checked by ``load_job`` itself.  The task block (``"task"``) is checked against the command's own declared
parameters (:func:`sqm.cli.job_cli.apply_task_block`).  The reference page's table of keys is
:func:`markdown_table`.  Standard library only: every party process loads a job file."""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from sqm.errors import UsageError

# JSON type name -> the Python types json.load makes of it (a bool is not an integer or a number here)
_PY = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "object": (dict,),
       "array": (list,), "null": (type(None),)}


@dataclass(frozen=True)
class Key:
    """One key: its name, its JSON types (``"null"`` among them: null means left out), its default (``None``:
    required) and what it means."""
    name: str
    types: tuple[str, ...]
    default: str | None
    meaning: str

    def accepts(self, value) -> bool:
        if isinstance(value, bool):
            return "boolean" in self.types
        return any(isinstance(value, _PY[t]) for t in self.types)

    @property
    def type_text(self) -> str:
        """The types as a reader says them: "a string or null"."""
        words = {"string": "a string", "integer": "an integer", "number": "a number", "boolean": "true or false",
                 "object": "an object", "array": "a list", "null": "null"}
        return " or ".join(words[t] for t in self.types)


JOB_KEYS: tuple[Key, ...] = (
    Key("job_id", ("string", "null"), "none (needed to run one party with `--index`)",
        "32 hex digits, fresh for every job (`write_job` draws one): binds every party to this job"),
    Key("name", ("string", "null"), "the name in each party's certificate",
        "the job's name in the parties' TLS certificates (`sqm keys request --job NAME`)"),
    Key("dataset", ("string", "null"), "`name`", "the dataset the server's privacy-budget ledger charges"),
    Key("id_column", ("string",), '`"id"`', "the column holding the record ids in every party's table"),
    Key("min_intersection", ("integer",), "100", "the fewest records in common the job runs on"),
    Key("hide_membership", ("boolean",), "`false`",
        "align the records without telling any client who is in the intersection, or how many"),
    Key("alignment_keys", ("string",), '`"threshold"`',
        '`"threshold"`: ids blinded under keys no coalition of up to t parties holds (t the runtime\'s threshold; '
        'with t = 1, one key the clients share, one multiplication per id); `"all"`: under every client\'s key, so '
        'no coalition lacking one client can test an id (n multiplications per id)'),
    Key("task", ("object", "null"), "none (the command line is the task)",
        'the job: `{"statistic": "pca", its parameters...}`, checked against the command\'s parameters (a '
        'linreg job\'s label range among them: `"label_range": [lo, hi]`)'),
    Key("parties", ("array",), None, "the parties' entries in index order: party 0 the server, then the clients"),
)

PARTY_KEYS: tuple[Key, ...] = (
    Key("address", ("string",), None, "`host:port` where the party listens"),
    Key("name", ("string", "null"), '`"server"`, `"clientI"`', "the party's name in what is printed"),
    Key("file", ("string", "null"), "none (its operator's `--data-file`)",
        "its table, relative to the job file's folder (a party's own setting: a local job only)"),
    Key("bounds", ("object", "null"), "none (no column scaled)",
        'a client\'s public column ranges, `{"age": [0, 120], ...}` (a regression label\'s range is the task\'s)'),
    Key("norm_share", ("number", "null"), "its share of the columns",
        "a client's public share of the squared row norm bound, in (0, 1] (every client or none)"),
    Key("fingerprint", ("string", "null"), "none (not pinned)",
        '`"sha256:<64 hex>"`: pins the party\'s public key (`sqm keys fingerprint`)'),
    Key("workers", ("integer", "null"), "none (one process per party)",
        "the party's shard workers, 2 to 1024 (every party the same)"),
    Key("model", ("string", "null"), "none (its operator's `--model`)",
        "`FILE:FACTORY`, its own model code (a PBM-VFL job; a party's own setting: a local job only)"),
    Key("engine", ("string", "null"), "none (local processes)",
        "its shard workers' Dask scheduler (a party's own setting: a local job only)"),
    Key("worker_addresses", ("array", "null"), "the ports after its address",
        "where its shard workers listen, one `host:port` per worker (a party's own setting: a local job only)"),
)


def _check(obj: dict, keys: tuple[Key, ...], where: str, whose: str) -> None:
    """Refuse an unknown key of ``obj`` (suggesting the closest declared one), a value of another JSON type or a
    required key left out; ``where`` names the object ("job file X: client 2's entry"), ``whose`` its owner's
    values ("job file X: client 2's")."""
    by_name = {k.name: k for k in keys}
    for name in obj:
        if name not in by_name:
            close = difflib.get_close_matches(str(name), list(by_name), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"the keys are {', '.join(by_name)}"
            raise UsageError(f"{where} has an unknown key {name!r}: {hint}")
    for name, value in obj.items():
        key = by_name[name]
        if not key.accepts(value):
            raise UsageError(f"{whose} {name!r} must be {key.type_text}, got {value!r}")
    for key in keys:
        if key.default is None and key.name not in obj:
            raise UsageError(f"{where} needs {key.name!r} ({key.meaning.replace('`', '')})")


def check_job_keys(raw: dict, where: str) -> None:
    """Check a job file's keys and their JSON types (``where``: "job file PATH"), and every party entry's that is
    an object, naming the party; nothing is read yet."""
    _check(raw, JOB_KEYS, where, f"{where}:")
    for i, entry in enumerate(raw["parties"]):
        if isinstance(entry, dict):
            who = f"{where}: {'the server' if i == 0 else f'client {i}'}'s"
            _check(entry, PARTY_KEYS, f"{who} entry", who)


def markdown_table() -> str:
    """The reference page's table of the job file's keys (docs/reference/jobs.md holds this text)."""
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for prefix, keys in (("", JOB_KEYS), ("parties[i].", PARTY_KEYS)):
        rows += [f"| `{prefix}{k.name}` | {' or '.join(k.types)} | {k.default or 'required'} | {k.meaning} |"
                 for k in keys]
    return "\n".join(rows) + "\n"
