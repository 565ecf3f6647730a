"""The task contract of job-file jobs: every hook the job framework (:mod:`sqm.framework.spec`) calls on a task,
declared once, with its default.  Standard library only: a party process and ``sqm --help`` import it.

A task is picklable (it travels to the party processes this machine starts, never over the network) and
implements the three abstract methods; it overrides the hooks it supports:

- ``public()``: the public parameters every party must agree on (compared by hash first); never a seed or anything
  derived from one;
- ``async run(ctx, table, meta)``: this party's part (``table`` is its party table, None at the server), making the
  same sequence of exchanges at every party; returns this party's result dict;
- ``release(meta)``: the :class:`sqm.mechanism.report.PrivacyReport` of what the job releases (its events), planned from
  the public counts without randomness; the server's ledger charges it before any share is sent;
- ``seed``: None (OS entropy) or the seed from this party's own command line (a labelled insecure experiment,
  :func:`sqm.framework.party.seed_policy`);
- ``charges``: whether the ledgers charge ``release(meta)`` (default True; a job that releases nothing of the
  data, e.g. scoring with a released model, says False and no ledger is consulted);
- ``clamp_only``: declared ranges clamp the values and scale nothing (default False; a scoring job says True);
- ``server_table``: the server holds a table of its own, keyed by the same ids (a PBM-VFL job's labels: the job
  file's party 0 ``"file"``); it then joins the record alignment and ``run`` gets it (default False: the server
  holds no data, and a job file giving it a file is refused);
- ``party_models``: the task runs each party's own model code (the job file's ``"model"``, or ``--model``;
  default False: a job file naming some is refused); ``for_party(index, party)`` gives the task party
  ``index`` runs, from its entry of the job file (:class:`sqm.framework.spec.PartySpec`; default: the task itself);
- ``streams``: whether a party file sorted by id may be read chunk by chunk (default False: read whole);
- ``releases_model``: the release is a model (default False); at the job's end the server sends
  ``released_model(result)`` (:mod:`sqm.framework.released_models`: the model the command's ``--json`` holds, from
  the server's result) to every client, whose ledger records its digest with the job's entry;
- ``with_ledger(guard)``: the task this party runs with its own ledger guard in hand
  (:class:`sqm.framework.ledger_guard.LedgerGuard`, its dataset resolved; default: the task itself; a scoring job
  checks its model against it);
- ``row_norm_bound``: the public bound on a record's features into which a client's declared column ranges
  (``"bounds"``) and norm shares (``"norm_share"``) scale (default None: the task takes neither, and a job file
  declaring them is refused); with it, ``party_bounds`` (each client's share, None: by column counts),
  ``with_party_bounds(bounds)`` (the task with given shares), ``feature_counts(meta)`` (the columns the bound
  covers, per client), ``check_bounds(bounds)`` (refuses ranges it cannot use, e.g. on a label) and
  ``declared_bound(column, col_bound)`` (the bound one declared column is scaled to);
- ``declared_ranges(n_clients)``: column ranges the task itself declares, by client (a regression label's
  ``label_range``), used as ranges of that client's ``bounds`` (default: none);
- ``preflight(headers, n_clients)``: checks that need only the clients' column names (``headers``: client index
  -> its columns, the id column and dropped columns left out; every client for a local job, a party's own alone
  with ``--index``), run before any party starts or connects (default: none);
- ``check_table(table, pid, n_clients)``: a client's refusal of its own table, ``(detail, public reason)`` or
  None, made once it is read and before anything derived from it is sent (default: None).
"""
from __future__ import annotations

import abc
import copy
import dataclasses
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from sqm.mpc.protocols.api import PartyAPI


INSECURE_SEEDED = "INSECURE: seeded (every party's noise derives from the seed)"


def switches_of(values: dict, secure_mode: bool) -> dict[str, object]:
    """A task's announced switches from its declared values (epsilon and delta left out: the task's summary says
    them) and whether its randomness is OS entropy (else ``"randomness"`` says it is seeded, hence insecure)."""
    out: dict[str, object] = {k: v for k, v in values.items() if k not in ("epsilon", "delta")}
    return out | ({} if secure_mode else {"randomness": INSECURE_SEEDED})


def check_label_header(headers: dict[int, list[str]], client: int, column: str) -> None:
    """The label party's (client ``client``) column names must hold the label ``column`` and a feature besides it;
    a UsageError names the client and the columns (and the client whose file holds the label instead)."""
    from sqm.errors import UsageError

    cols = headers.get(client)
    if cols is None:
        return
    if column not in cols:
        elsewhere = [j for j, c in headers.items() if column in c]
        hint = (f": client {elsewhere[0]}'s file has it, but the label party is client {client}" if elsewhere
                else ": name the label's column with --label-column or \"label_column\" in the task block")
        raise UsageError(f"client {client} (the label party) has no label column '{column}' in its file; its "
                         f"columns are {cols[:20]}{hint}")
    if len(cols) < 2:
        raise UsageError(f"client {client} (the label party) needs feature columns besides the label '{column}'")


class JobTask(abc.ABC):
    """What a job computes (see the module docstring for every hook)."""

    seed = None
    streams = False
    charges = True  # its release is charged to the privacy-budget ledgers (a scoring job's is not)
    clamp_only = False  # declared column ranges clamp the values without scaling them (a scoring job's)
    party_models = False  # each party runs its own model code (the job file's "model" entries)
    hides_membership = False  # the job may align records hiding membership (one covariance-like release over the union)
    releases_model = False  # its release is a model, sent to every client at the end and recorded in their ledgers
    # the relation of its report's epsilons (sqm.mechanism.report.NEIGHBOURING; ZERO_OUT, spelled here so that this
    # module does not import numpy for --help), announced
    neighbouring = "zero-out"
    # a file on each party's machine (party i's: "PATH.i") where its long steps' progress goes (the command that
    # launched it shows bars, sqm.framework.progress.follow_steps); not public, never compared; None: none
    steps_path: str | None = None

    @property
    def server_table(self) -> bool:
        """The server holds a table of its own (a PBM-VFL job's labels) and joins the alignment."""
        return False

    @property
    def row_norm_bound(self) -> float | None:
        """The public bound on a record's features into which declared column ranges scale (None: none)."""
        return None

    @property
    def party_bounds(self) -> tuple | None:
        """Each client's share of :attr:`row_norm_bound` (None: the default split)."""
        return None

    def switches(self) -> dict[str, object]:
        """The release's privacy-relevant parameters, for the announcement each party prints before its records are
        used (default: none declared); ``"randomness"`` says when a seed makes it reproducible, hence insecure."""
        return {}

    @abc.abstractmethod
    def public(self):
        """The public parameters every party agrees on."""

    @abc.abstractmethod
    async def run(self, ctx: PartyAPI, table, meta) -> dict:
        """This party's part of the job: ``ctx`` its transport with the job's secure evaluation (its shard workers
        and membership hiding, as the job file says)."""

    @abc.abstractmethod
    def release(self, meta):
        """The privacy report of what the job releases, from public counts."""

    def summary(self) -> str:
        """What the job releases, in one phrase for each party's operator (printed before any data leaves a party):
        the statistic and its privacy target (epsilon, delta against the server, its relation in words,
        :func:`sqm.mechanism.report.relation_phrase`) where the task has one."""
        from sqm.mechanism.report import relation_phrase

        name = str(self.public()[0])
        for owner in (self, getattr(self, "est", None), getattr(self, "estimator", None)):
            eps, delta = getattr(owner, "epsilon", None), getattr(owner, "delta", None)
            if isinstance(eps, (int, float)) and not isinstance(eps, bool):
                return (f"{name} released to the server at epsilon {eps:g}"
                        + (f", delta {delta:g}" if isinstance(delta, float) else "")
                        + f" ({relation_phrase(self.neighbouring)})")
        return name + ("" if self.charges else " (charges no privacy budget)")

    def feature_counts(self, meta) -> list[int]:
        """The columns per client that ``row_norm_bound`` covers (default: all of them)."""
        return list(meta.col_counts)

    def check_bounds(self, bounds) -> None:  # noqa: B027  an optional hook: by default every declared range is usable
        """Refuse declared column ranges this task cannot use (a ValueError naming them); default: any."""

    def declared_bound(self, column: str, col_bound: float) -> float:
        """The bound a column with a declared range is scaled to: by default its share ``col_bound`` of the row
        norm bound (a regression label has a bound of its own)."""
        return col_bound

    def declared_ranges(self, n_clients: int) -> dict[int, tuple]:
        """Column ranges the task declares itself, client index -> ((column, lo, hi), ...) (default: none)."""
        return {}

    def preflight(self, headers: dict[int, list[str]], n_clients: int) -> None:  # noqa: B027  optional hook
        """Refuse (a UsageError naming the cause and the client) what the clients' column names alone show to be
        wrong; ``headers`` holds the clients known here (default: nothing to check)."""

    def check_table(self, table, pid: int, n_clients: int) -> tuple[str, str] | None:
        """Client ``pid``'s refusal of its own table read whole: (the detail for its operator, the public reason
        every peer is told), or None (default)."""
        return None

    def released_model(self, result: dict) -> dict:
        """The server's model numbers (:func:`sqm.framework.released_models.model_numbers`) from its result."""
        raise NotImplementedError(f"{type(self).__name__} releases no model")

    def with_ledger(self, ledger) -> JobTask:
        """The task this party runs with its own ledger guard (default: this task)."""
        return self

    def for_party(self, index: int, party) -> JobTask:
        """The task party ``index`` runs, given its job-file entry ``party`` (default: this task)."""
        return self

    def with_party_bounds(self, party_bounds) -> JobTask:
        """This task with each client's share of ``row_norm_bound`` given (norm shares)."""
        raise NotImplementedError(f"{type(self).__name__} takes no norm shares")

    @property
    def takes_bounds(self) -> bool:
        """Whether declared column ranges and norm shares scale into this task's ``row_norm_bound`` (or, with
        ``clamp_only``, only clamp the values)."""
        return self.row_norm_bound is not None or self.clamp_only


class DeclaredTask(JobTask):
    """A job task whose release's parameters are one declaration, ``self.params`` (a
    :class:`sqm.mechanism.params.Params`): its fields read as the task's own attributes (``task.epsilon``), and
    the row norm bound and the clients' shares of it are the declaration's."""

    params: Any
    secure_mode: bool = True  # False: a seeded run (insecure_reproducible)

    def __getattr__(self, name: str):
        params = self.__dict__.get("params")  # not self.params: this runs for attributes not yet set, too
        if params is not None and name in type(params).names():
            return getattr(params, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def row_norm_bound(self) -> float | None:
        """A client's declared column ranges scale into it (:mod:`sqm.framework.spec`)."""
        return self.params.row_norm_bound

    @property
    def party_bounds(self) -> tuple | None:
        return self.params.party_bounds

    def switches(self) -> dict[str, object]:
        return switches_of(self.params.as_dict(), self.secure_mode)

    def with_party_bounds(self, party_bounds) -> Self:
        """This task with the clients' sub-row bounds c_j (from the job file's declared norm shares)."""
        task = copy.copy(self)
        task.params = dataclasses.replace(self.params, party_bounds=tuple(float(b) for b in party_bounds))
        return task
