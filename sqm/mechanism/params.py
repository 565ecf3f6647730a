"""One declaration per parameter: a release's parameters as a frozen dataclass whose fields carry their constraint,
default, help text and command-line spelling (scikit-learn's ``_parameter_constraints`` is the model).

From the one declaration (a subclass of :class:`Params`, each field made by :meth:`Param.field`) come:

- :meth:`Params.validate` (run on construction): every value inside its declared constraint, else a
  :class:`sqm.errors.UsageError` naming the parameter, its constraint and the value;
- :meth:`Params.public`: the tuple every party of a job agrees on (its digest binds them), built from the fields
  in declaration order: the statistic's name, then each ``public="always"`` field, then each ``public="tagged"``
  field as ``(name, value)`` where it differs from its default (so a job that leaves such a knob alone agrees
  on the same tuple as before the knob existed);
- :meth:`Params.add_options` and :meth:`Params.options`: the command line's options and the job file's task
  block keys (an option's argparse destination is the block's key);
- :meth:`Params.from_options`, :meth:`Params.mechanism_kwargs`: the values from parsed options, and the ones
  :class:`sqm.mechanism.release.SQM` takes as keyword arguments.

The parameters every SQM release shares (:data:`EPSILON`, :data:`DELTA`, :data:`GAMMA`, :data:`ROW_NORM_BOUND`,
:data:`PARTY_BOUNDS`, :data:`CHUNK_ROWS`, :data:`ROBUST_NOISE`, :data:`VERIFY_SHARING`, :data:`ROW_NORM_CHECK`) are
declared here once; an application's dataclass lists them (optionally with its own default or help) beside its own.
Standard library only: ``sqm --help`` and every party process import it.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, ClassVar
from collections.abc import Callable

from sqm.errors import UsageError

# ----- constraints --------------------------------------------------------------------------------------------


class Interval:
    """A parameter's domain, in scikit-learn's constraint style (``sklearn.utils._param_validation.Interval``):
    real numbers (not bools, not NaN) between ``low`` and ``high``, ``closed`` "neither", "left", "right" or
    "both".  Written here because the mechanism's modules must not import scikit-learn (party processes).
    ``says``: how an error words the domain (default: :meth:`describe`'s words)."""

    kind = float

    def __init__(self, low: float, high: float, closed: str, says: str | None = None):
        if closed not in ("neither", "left", "right", "both"):
            raise UsageError(f"closed must be neither, left, right or both, got {closed!r}")
        self.low, self.high, self.closed, self.says = float(low), float(high), closed, says

    def __contains__(self, v) -> bool:
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or math.isnan(v):
            return False
        try:
            x = float(v)
        except OverflowError:  # an int beyond the floats: beyond any finite bound too
            x = math.copysign(math.inf, v)
        lo_ok = x >= self.low if self.closed in ("left", "both") else x > self.low
        hi_ok = x <= self.high if self.closed in ("right", "both") else x < self.high
        return bool(lo_ok and hi_ok)

    def describe(self) -> str:
        if self.says is not None:
            return self.says
        lo = ">=" if self.closed in ("left", "both") else ">"
        if self.high == math.inf:
            return f"be > {self.low:g} (math.inf allowed)" if self.closed in ("right", "both") else \
                f"be a finite number {lo} {self.low:g}"
        return (f"lie in {'[' if lo == '>=' else '('}{self.low:g}, {self.high:g}"
                f"{']' if self.closed in ('right', 'both') else ')'}")


class Integer:
    """Whole numbers from ``low`` (and up to ``high``, if given): ints or integer-valued floats, never bools.
    ``note``: what the count counts, said in the error."""

    kind = int

    def __init__(self, low: int, high: int | None = None, note: str = ""):
        self.low, self.high, self.note = int(low), high, note

    def __contains__(self, v) -> bool:
        if isinstance(v, bool) or not (isinstance(v, numbers.Integral)
                                       or isinstance(v, float) and v.is_integer()):
            return False
        n = int(v)
        return self.low <= n and (self.high is None or n <= self.high)

    def describe(self) -> str:
        span = f">= {self.low}" if self.high is None else f"in [{self.low}, {self.high}]"
        return f"be an integer {span}" + (f" ({self.note})" if self.note else "")


class Boolean:
    """True or false (a flag on the command line)."""

    kind = bool

    def __contains__(self, v) -> bool:
        return isinstance(v, (bool, int)) and v in (True, False) or type(v).__name__ == "bool_"

    def describe(self) -> str:
        return "be true or false"


class Choice:
    """One of the ``values`` given."""

    kind = str

    def __init__(self, *values):
        self.values = tuple(values)

    def __contains__(self, v) -> bool:
        return isinstance(v, str) and v in self.values

    def describe(self) -> str:
        return "be one of " + ", ".join(repr(v) for v in self.values)


class Text:
    """A non-empty string (a column name)."""

    kind = str

    def __contains__(self, v) -> bool:
        return isinstance(v, str) and bool(v)

    def describe(self) -> str:
        return "be a non-empty string"


def public_range(v) -> tuple[float, float]:
    """A range ``[lo, hi]`` (a list or tuple: a job file's task block, or an option's two numbers) as the pair of
    floats :class:`Range` holds; a UsageError (a ValueError) if it is no pair of numbers."""
    if not isinstance(v, (list, tuple)) or len(v) != 2 or any(isinstance(b, (bool, str)) for b in v):
        raise UsageError(f"need a range [lo, hi] of two numbers, got {v!r}")
    return float(v[0]), float(v[1])


class Range:
    """A public range ``[lo, hi]``: two finite numbers with lo < hi (a column's declared range)."""

    kind = staticmethod(public_range)

    def __contains__(self, v) -> bool:
        try:
            lo, hi = public_range(v)
        except (TypeError, ValueError):
            return False
        return math.isfinite(lo) and math.isfinite(hi) and lo < hi

    def describe(self) -> str:
        return "be a range [lo, hi] of finite numbers with lo < hi"


# Every privacy parameter's domain, declared once and used by the mechanism, the accountant, the ledger, the
# estimators, the job tasks and the command line (sqm.mechanism.validation.check_param).
DOMAINS = {
    "epsilon": Interval(0, math.inf, "neither"),
    "epsilon or inf": Interval(0, math.inf, "right"),  # math.inf: no privacy (the non-private references)
    "delta": Interval(0, 1, "neither"),
    "gamma": Interval(1, math.inf, "left"),
    "mu": Interval(0, math.inf, "neither"),
    "base_rate": Interval(0, 1, "neither"),  # logistic regression's Taylor expansion point sigma(b0) (sensitivity)
}
POSITIVE = Interval(0, math.inf, "neither", says="be > 0")  # a bound, a scale, a rate: finite and > 0


# ----- one parameter's declaration ------------------------------------------------------------------------------


def _floats(v):
    return tuple(float(b) for b in v)


@dataclasses.dataclass(frozen=True)
class Param:
    """One parameter's declaration: ``default``; ``rule`` its constraint (None: any value, checked where it is
    used); ``optional``: None is allowed too; ``help``: the command-line help (``{default}`` is replaced by the
    default, formatted ``:g`` for numbers); ``option``: its argparse destination and task-block key (None: the
    field's name; "": no command-line option); ``flag`` (default ``--`` and the option with dashes);
    ``metavar``; ``public``: "always" (a position of :meth:`Params.public`), "tagged" (``(name, value)`` only
    where not the default) or "never"; ``label``: how an error names it (default: the field's name);
    ``canon``: the value as :meth:`Params.public` holds it (default: by the rule's kind; None stays None);
    ``mechanism``: an argument of :class:`sqm.mechanism.release.SQM` by the same name; ``negate`` (a
    :class:`Boolean` whose default is True): its option is a flag that says the opposite (``--no-intercept``
    for ``fit_intercept``), and so is the task block's key; ``error``: the whole message of a value outside the
    rule (``{value}`` is replaced by the value's repr), where a parameter's words are not "NAME must ..."."""

    default: Any = None
    rule: Any = None
    help: str = ""
    optional: bool = False
    option: str | None = None
    flag: str | None = None
    metavar: str | None = None
    public: str = "always"
    label: str | None = None
    canon: Callable | None = None
    mechanism: bool = False
    negate: bool = False
    error: str | None = None

    def field(self, **changes):
        """This declaration (with ``changes``) as a dataclass field of a :class:`Params` subclass."""
        p = dataclasses.replace(self, **changes)
        if p.public not in ("always", "tagged", "never"):
            raise UsageError(f"public must be always, tagged or never, got {p.public!r}")
        return dataclasses.field(default=p.default, metadata={"param": p})

    def check(self, value, name: str):
        """``value`` if it satisfies this declaration, else a UsageError naming the parameter and its rule."""
        if value is None and (self.optional or self.rule is None):
            return value
        if self.rule is not None and value not in self.rule:
            if self.error is not None:
                raise UsageError(self.error.replace("{value}", repr(value)))
            raise UsageError(f"{self.label or name} must {self.rule.describe()}, got {value!r}")
        return value

    def public_value(self, value):
        if value is None:
            return None
        if self.canon is not None:
            return self.canon(value)
        kind = getattr(self.rule, "kind", None)
        return value if kind is None else kind(value)

    def help_text(self) -> str:
        d = self.default
        shown = f"{d:g}" if isinstance(d, float) else str(d)
        return self.help.replace("{default}", shown)


# ----- a release's parameters --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Params:
    """The base of every release's parameter dataclass (subclasses: ``@dataclasses.dataclass(frozen=True)``, a
    ``statistic`` name, fields made by :meth:`Param.field`).  Valid by construction (:meth:`validate`)."""

    statistic: ClassVar[str] = ""

    def __post_init__(self):
        self.validate()

    @classmethod
    def declared(cls) -> list[tuple[str, Param]]:
        """(name, declaration) of every field, in declaration order."""
        return [(f.name, f.metadata["param"]) for f in dataclasses.fields(cls)]

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(name for name, _ in cls.declared())

    @classmethod
    def default(cls, name: str):
        """Field ``name``'s declared default."""
        return dict(cls.declared())[name].default

    def validate(self) -> None:
        """Every field inside its declared constraint (in declaration order), else a UsageError naming it."""
        for name, p in self.declared():
            p.check(getattr(self, name), name)

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.names()}

    def public(self) -> tuple:
        """The public parameters every party agrees on: the statistic, the ``always`` fields in declaration
        order, then each ``tagged`` field that differs from its default as ``(name, value)``."""
        head, tagged = [self.statistic], []
        for name, p in self.declared():
            v = getattr(self, name)
            if p.public == "always":
                head.append(p.public_value(v))
            elif p.public == "tagged" and v != p.default:
                tagged.append((name, p.public_value(v)))
        return (*head, *tagged)

    def mechanism_kwargs(self) -> dict:
        """The fields :class:`sqm.mechanism.release.SQM` takes, by name."""
        return {name: getattr(self, name) for name, p in self.declared() if p.mechanism}

    @classmethod
    def parameter_constraints(cls) -> dict[str, list | str]:
        """The fields' constraints in scikit-learn's ``_parameter_constraints`` form, for an estimator whose
        parameters these are (scikit-learn's tooling reads them; :meth:`validate` stays the check that runs,
        naming the parameter in the project's words).  Imports scikit-learn: an estimator's module calls it."""
        return {name: sklearn_constraints(p) for name, p in cls.declared()}

    # ----- the command line and the job file's task block -----------------------------------------------------
    @classmethod
    def options(cls) -> dict[str, str]:
        """argparse destination (the task block's key) -> field name, for the fields with an option."""
        return {p.option or name: name for name, p in cls.declared() if p.option != ""}

    @classmethod
    def from_options(cls, args, **changes):
        """The parameters from parsed options (fields without an option: their defaults, or ``changes``)."""
        declared = dict(cls.declared())
        values = {name: not getattr(args, dest) if declared[name].negate else getattr(args, dest)
                  for dest, name in cls.options().items()}
        return cls(**{**values, **changes})

    @classmethod
    def add_options(cls, parser, only=None) -> None:
        """Add an option to ``parser`` for every field that has one, in declaration order (or for the fields named
        in ``only``, in that order), skipping those the parser has already (a shared parent's)."""
        have = {a.dest for a in parser._actions}
        declared = dict(cls.declared())
        for name in cls.names() if only is None else only:
            p = declared[name]
            if p.option != "" and (p.option or name) not in have:
                add_option(parser, p.option or name, p)


def sklearn_constraints(p: Param) -> list | str:
    """Declaration ``p``'s rule as scikit-learn constraints (``sklearn.utils._param_validation``): an
    :class:`Interval` a real ``Interval``, an :class:`Integer` an integral one, a :class:`Boolean` "boolean", a
    :class:`Choice` ``StrOptions``, a :class:`Text` ``str`` (None added where optional); no rule: "no_validation".
    scikit-learn's are a little wider or narrower at the edges: its intervals take bools, its integral ones no
    integer-valued floats, its "boolean" not 0 and 1."""
    from numbers import Integral, Real

    from sklearn.utils._param_validation import Interval as SkInterval
    from sklearn.utils._param_validation import StrOptions

    rule = p.rule
    out: list
    if rule is None:
        return "no_validation"
    if isinstance(rule, Interval):
        inf_ok = rule.closed in ("right", "both")
        right = None if rule.high == math.inf and not inf_ok else rule.high
        left = None if rule.low == -math.inf else rule.low
        out = [SkInterval(Real, left, right, closed=rule.closed)]
    elif isinstance(rule, Integer):
        out = [SkInterval(Integral, rule.low, rule.high, closed="left" if rule.high is None else "both")]
    elif isinstance(rule, Boolean):
        out = ["boolean"]
    elif isinstance(rule, Choice):
        out = [StrOptions(set(rule.values))]
    elif isinstance(rule, Text):
        out = [str]
    else:
        raise UsageError(f"no scikit-learn form for the constraint {rule!r}")
    return out + [None] * p.optional


def add_option(parser, dest: str, p: Param) -> None:
    """Parameter ``p``'s command-line option on ``parser`` (argparse destination ``dest``): a flag for a
    :class:`Boolean`, else typed by its rule, with its default, help and metavar."""
    flag = p.flag or "--" + dest.replace("_", "-")
    kw: dict[str, object] = {"dest": dest, "help": p.help_text()}
    if isinstance(p.rule, Boolean):  # a flag: given, the value is True (False for a negated one)
        parser.add_argument(flag, action="store_true", **kw)
        return
    if isinstance(p.rule, Range):  # two numbers, "--label-range -10 20" (argparse reads "-10" as a number)
        parser.add_argument(flag, nargs=2, type=float, default=p.default, metavar=("LO", "HI"), **kw)
        return
    kw.update(default=p.default, type=getattr(p.rule, "kind", None) or str)
    if isinstance(p.rule, Choice):
        kw["choices"] = p.rule.values
    if p.metavar:
        kw["metavar"] = p.metavar
    parser.add_argument(flag, **kw)


# ----- the parameters every SQM release shares ----------------------------------------------------------------

EPSILON = Param(1.0, DOMAINS["epsilon"], "server-observed epsilon target (default {default})", mechanism=True)
DELTA = Param(1e-5, DOMAINS["delta"], "delta (default {default})", mechanism=True)
GAMMA = Param(4096.0, DOMAINS["gamma"], "quantization scale gamma >= 1 (default {default})", mechanism=True)
ROW_NORM_BOUND = Param(1.0, POSITIVE, "c: every record's ||x|| (default "
                       "{default})", mechanism=True)
# each client's share c_j of the row norm bound (None: by its columns); from the job file's norm shares
PARTY_BOUNDS = Param(None, None, option="", canon=_floats, mechanism=True)
CHUNK_ROWS = Param(None, Integer(1), "records per chunk of the secure evaluation, the same at every party; the "
                   "result does not depend on it", optional=True, metavar="N", public="tagged", mechanism=True)


def robust_noise_help(release: str = "") -> str:
    """``--robust-noise``'s help (``release``: which release it applies to, where a command has others)."""
    return (f"{release + ': ' if release else ''}each client adds Sk(mu / (n - K)) so that the epsilon holds even if "
            f"up to K clients add no noise (a deviating client's saving); the noise variance is then n / (n - K) "
            f"times the calibrated one (default {{default}}: the semi-honest model, where every client adds its "
            f"share)")


def verify_sharing_help(checked: str = "before the release",
                        extra: str = "two more exchanges are made: the seeds and the check") -> str:
    """``--verify-sharing``'s help (``checked``: when the sharings are checked; ``extra``: what it costs)."""
    return (f"{checked}, the parties check that every client's input sharing is consistent (degree <= t) and name "
            f"a client whose sharing is not (at least 3 clients; the server then receives shares of every input "
            f"too, and {extra})")


# tolerating clients that withhold their noise, detecting inconsistent sharings (SQM's robust_noise, verify_sharing)
ROBUST_NOISE = Param(0, Integer(0, note="clients that may withhold noise"), robust_noise_help(), metavar="K",
                     public="tagged", mechanism=True)
VERIFY_SHARING = Param(False, Boolean(), verify_sharing_help(), public="tagged", mechanism=True)
ROW_NORM_CHECK = Param(False, Boolean(), "bound whole rows by c inside the secure evaluation", public="tagged",
                       mechanism=True)
VERIFY_INPUTS = Param(False, Boolean(), "before the release, every client proves to the other parties, without "
                      "revealing its values, that each quantized value it shares is within its column's bound and "
                      "each record's squared norm within its column group's limit (the bounds the sensitivity "
                      "uses), and that its noise share is the exact draw from a seed it committed to before joint "
                      "coins (checked by the next client, which learns that share: the client-observed epsilon "
                      "counts it); "
                      "a client whose proof or noise check fails is named and nothing is released (the server then "
                      "receives shares of every input; the checks add about a dozen exchanges to a job, pipelined "
                      "over its chunks, and send 3 field elements per value whose range is 512 to 65,535 wide, "
                      "its base-8 digits otherwise)", public="tagged", mechanism=True)
