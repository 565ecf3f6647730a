"""The sqm data home and the real datasets' fetchers, in scikit-learn's ``get_data_home`` / ``fetch_*`` style.

:func:`data_home`: the ``--data-home`` argument, else ``$SQM_DATA``, else ``~/sqm_data`` (created when a dataset
is fetched, never when one is read).  :data:`REGISTRY`: the one list of the real datasets (adult, credit-default,
phishing, citeseer): each one's folder in the data home, its files, the public source of each file and each
file's SHA-256.  :func:`fetch` looks in the data home, else downloads (a progress bar; to a temporary folder in
the data home, then verified, then renamed into place) and ALWAYS verifies every file: a mismatch is a
:class:`ChecksumError` naming the file, the expected and the actual digest, and the bad file is never used.
``fetch_adult``, ``fetch_credit_default``, ``fetch_phishing``, ``fetch_citeseer``: :func:`fetch` of one dataset.

Two files are built by code from the others, never downloaded: ``phishing/phishing.csv`` (from the ARFF file)
and ``citeseer/citeseer_planetoid.npz`` (from the Planetoid ``ind.citeseer.*`` files, :func:`assemble_citeseer`).
A mirror (``mirror=`` or ``$SQM_DATA_MIRROR``: an ``http(s)://`` or ``file://`` base URL serving a copy of a
data home, ``BASE/FOLDER/FILE``) replaces the public sources, e.g. inside a network without internet access.
"""
from __future__ import annotations

import collections
import hashlib
import os
import pickle
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqm.framework.progress import make_bar
from sqm.errors import UsageError

if TYPE_CHECKING:  # numpy is imported where it is used: `sqm --help` reads this module
    import numpy as np

ENV_HOME, ENV_MIRROR = "SQM_DATA", "SQM_DATA_MIRROR"


def data_home(data_home: str | None = None) -> str:
    """The data home's absolute path: ``data_home``, else ``$SQM_DATA``, else ``~/sqm_data`` (not created here)."""
    folder = data_home or os.environ.get(ENV_HOME) or os.path.join("~", "sqm_data")
    return os.path.abspath(os.path.expanduser(str(folder)))


_home = data_home  # fetch and status take an argument of the same name


# ----- the registry ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Source:
    """A public URL of a file; ``drop_first_line``: that copy has one extra first line (a CSV header someone
    prepended, UCI's ``|1x3 Cross validator``), removed before the checksum is verified."""

    url: str
    drop_first_line: bool = False


@dataclass(frozen=True)
class DataFile:
    """One file of a dataset: its ``sha256`` (of its bytes; of its arrays for ``.npz``, see :func:`digest`),
    its size in bytes as published, and either its ``sources`` (tried in order) or ``built_from`` (the files
    :data:`BUILDERS` makes it from)."""

    name: str
    sha256: str
    size: int
    sources: tuple[Source, ...] = ()
    built_from: tuple[str, ...] = ()


@dataclass(frozen=True)
class RealDataset:
    name: str  # as load_dataset names it
    folder: str  # its folder in the data home
    files: tuple[DataFile, ...]
    about: str


def _gh(repo: str, commit: str, path: str, drop_first_line: bool = False) -> Source:
    return Source(f"https://raw.githubusercontent.com/{repo}/{commit}/{path}", drop_first_line)


_ADULT = ("advaithca/lessThanGreaterThan50k", "e91f4a9036bba2042c17da9d8e75b22cea4d9b7c")  # a header line added
_UCI_ADULT = "https://archive.ics.uci.edu/ml/machine-learning-databases/adult/"
_PLANETOID = ("kimiyoung/planetoid", "af6abf468a772cc055bec88c52e4d6f51b7c37e3")
_CITESEER_IND = {  # ind.citeseer.<part>: bytes, sha256
    "x": (31087, "d20de19150741e555de0ed037195630fc194114ebc7fd72ced62810148aa22f6"),
    "y": (3014, "8ba87e515d8e3ee3cf52f6d2c5b86aa73f11ecad825a808455209ec26cd54924"),
    "tx": (260321, "539a8906a2da97628d212f2fdd668c109a8b3f0d36574b59e5d3fd5b5303da21"),
    "ty": (24135, "55e5bd1ba1e733a04598753ad1a8d57957f4b8f89e74519f41f4f4938767e4ce"),
    "allx": (595021, "2ac30345d95c9ec933a817ee0bdd6a5f077f8c184a20e696910192d534414668"),
    "ally": (55623, "f704b2d986dde6c2669934de1f3ae5696a6cf9455c0f6b2646a2d135ea0a1c95"),
    "graph": (61987, "d79a4ef9d3e7169aee8946145f6b7306e35bc79bffad26346cfb94e10e9912a7"),
    "test.index": (5000, "2af990671580b6b2df5d158d1038f8292e30c9cd821b5453f399659b25b723d4"),
}

REGISTRY: dict[str, RealDataset] = {d.name: d for d in (
    RealDataset("adult", "adult", (
        DataFile("adult.data", "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d", 3974305,
                 (_gh(*_ADULT, "adult.data", True), Source(_UCI_ADULT + "adult.data"))),
        DataFile("adult.test", "72567b94f5c1a6f8501377dd80f93892c3848ff071cf91ba47e00b0785a28074", 2003132,
                 (_gh(*_ADULT, "adult.test", True), Source(_UCI_ADULT + "adult.test", True))),
        DataFile("adult.names", "c248284c0b5de30c9e1958d6cdd168a34a654758b620e68f46aefa83fc0a576a", 5229,
                 (_gh(*_ADULT, "adult.names"), Source(_UCI_ADULT + "adult.names")))),
        "UCI Adult (Census Income), Kohavi & Becker 1996"),
    RealDataset("credit_default", "credit-default", (
        DataFile("UCI_Credit_Card.csv", "023eb2c3ad9efd15e7869616fa50a0143f25223105c7069ba632431530afdb61",
                 2905603, (_gh("fju155447/uci", "84670e783ab9fd2459b7096d82965f28dafb66b2",
                               "UCI_Credit_Card.csv"),)),),
        "UCI Default of Credit Card Clients, Yeh & Lien 2009"),
    RealDataset("phishing", "phishing", (
        DataFile("Training_Dataset.arff", "0dfcd84ccdedca6e1be2ce26452c1f1089ac3f839b9a1b0ab1cdcf6d895f9a70",
                 800856, (_gh("santoshchejarla/WebSecAsst", "6d4d2626795a74878329586fff786224b5b457fd",
                              "Training%20Dataset.arff"),)),
        DataFile("phishing.csv", "685e9fbdbe08c8b23fdb82e06cf5e154a8516e93f7b07f8a67328f17f86d0d72", 789147,
                 built_from=("Training_Dataset.arff",))),
        "UCI Phishing Websites (id 327), Mohammad, Thabtah & McCluskey"),
    RealDataset("citeseer", "citeseer", tuple(
        DataFile(f"ind.citeseer.{p}", sha, size, (_gh(*_PLANETOID, f"data/ind.citeseer.{p}"),))
        for p, (size, sha) in _CITESEER_IND.items()) + (
        DataFile("citeseer_planetoid.npz", "2ea190aa30d2d04d9a51d6b293c1d2c0a1dfde2f941b1ccc6bd02e4ceec07fa9",
                 248326, built_from=tuple(f"ind.citeseer.{p}" for p in _CITESEER_IND)),),
        "CiteSeer, Planetoid split (Yang, Cohen & Salakhutdinov 2016)"),
)}


def dataset_info(name: str) -> RealDataset:
    """The registry entry of ``name`` (``credit-default`` and ``credit_default`` both name it)."""
    for d in REGISTRY.values():
        if name in (d.name, d.folder):
            return d
    raise UsageError(f"unknown dataset {name!r}: the datasets sqm fetches are {', '.join(REGISTRY)}")


# ----- checksums -------------------------------------------------------------------------------------------

class ChecksumError(UsageError):
    """A file's SHA-256 is not the registry's: ``path``, ``expected``, ``actual``."""

    def __init__(self, path: str, expected: str, actual: str, origin: str = ""):
        self.path, self.expected, self.actual = path, expected, actual
        super().__init__(f"checksum mismatch for {path}{origin}: SHA-256 expected {expected}, got {actual}; "
                         f"the file is not used")


class DataMissing(UsageError):
    """A dataset is not in the data home and was not to be downloaded."""


def digest(path: str) -> str:
    """SHA-256 of a file's bytes; of an ``.npz`` file, of its arrays (name, dtype, shape and C-order bytes of
    each, by name), since a zip archive's bytes carry timestamps and the assembled CiteSeer file is rebuilt."""
    h = hashlib.sha256()
    if path.endswith(".npz"):
        import numpy as np

        with np.load(path, allow_pickle=False) as z:
            for k in sorted(z.files):
                a = np.ascontiguousarray(z[k])
                h.update(f"{k}|{a.dtype.str}|{a.shape}|".encode())
                h.update(a.tobytes())
        return h.hexdigest()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_file(path: str, f: DataFile, origin: str = "") -> None:
    """Raise :class:`ChecksumError` unless the file at ``path`` is the registry's ``f``."""
    try:
        actual = digest(path)
    except (OSError, ValueError, zipfile.BadZipFile) as e:  # e.g. a truncated .npz
        actual = f"(unreadable: {type(e).__name__}: {e})"
    if actual != f.sha256:
        raise ChecksumError(path, f.sha256, actual, origin)


# ----- building the derived files --------------------------------------------------------------------------

def build_phishing_csv(arff: str, out: str) -> None:
    """phishing.csv from the UCI ARFF file: a header of the 31 ``@attribute`` names in order, then the data
    rows unchanged (LF line endings)."""
    names, rows, in_data = [], [], False
    with open(arff, encoding="ascii", newline="") as f:
        for line in f:
            line = line.strip()
            if in_data:
                if line and not line.startswith("%"):
                    rows.append(line)
            elif line.lower().startswith("@attribute"):
                names.append(line.split()[1])
            elif line.lower().startswith("@data"):
                in_data = True
    with open(out, "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join([",".join(names)] + rows) + "\n")


class _PlanetoidUnpickler(pickle.Unpickler):
    """Unpickles the Planetoid ``ind.citeseer.*`` files (Python-2 pickles), resolving ONLY the globals they
    hold (a ``pickletools`` scan: numpy arrays and dtypes, scipy's csr_matrix, the graph's defaultdict of
    lists).  A pickle can name any importable callable and have it called while loading (``os.system``), so
    an unrestricted ``pickle.load`` of a downloaded file runs whatever its author wrote; these files are
    unpickled only after their SHA-256 matched the registry, and any other global is refused even then."""

    def find_class(self, module, name):
        import numpy as np
        from scipy.sparse import csr_matrix

        try:
            from numpy._core.multiarray import _reconstruct
        except ImportError:  # numpy < 2
            from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]  # numpy 1's name for it
        allowed = {("numpy", "dtype"): np.dtype, ("numpy", "ndarray"): np.ndarray,
                   ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
                   ("scipy.sparse.csr", "csr_matrix"): csr_matrix,
                   ("collections", "defaultdict"): collections.defaultdict, ("__builtin__", "list"): list}
        if (module, name) not in allowed:
            raise pickle.UnpicklingError(f"refused global {module}.{name} in a Planetoid file")
        return allowed[(module, name)]


def _unpickle(path: str):
    with open(path, "rb") as f:
        return _PlanetoidUnpickler(f, encoding="latin1").load()


def assemble_citeseer(files: dict[str, str]) -> dict[str, np.ndarray]:
    """The Planetoid/GCN assembly of CiteSeer from the ``ind.citeseer.*`` files (``files``: their name ->
    path, each already verified): node i is row i; the test nodes' rows (tx, ty) go to their ids in
    ``test.index``, and the 15 test ids missing from tx (isolated nodes) get zero features and label -1.
    Returns ``features`` (uint8, 3327 x 3703), ``labels`` (int64, 0..5, -1), ``edges`` (int64, undirected,
    u < v, no self-loops, sorted), ``idx_train`` (0..119), ``idx_val`` (120..619), ``idx_test`` (the sorted
    test ids)."""
    import numpy as np

    part = {p: _unpickle(files[f"ind.citeseer.{p}"]) for p in ("x", "y", "tx", "ty", "allx", "ally", "graph")}
    with open(files["ind.citeseer.test.index"]) as f:
        test = np.array([int(t) for t in f.read().split()], dtype=np.int64)
    order = np.sort(test)
    n = max(len(part["graph"]), int(order[-1]) + 1)
    allx, tx = part["allx"].toarray(), part["tx"].toarray()
    features = np.zeros((n, allx.shape[1]), dtype=np.uint8)
    onehot = np.zeros((n, part["ally"].shape[1]))
    features[:len(allx)], onehot[:len(allx)] = allx, part["ally"]
    features[test], onehot[test] = tx, part["ty"]  # tx's row k is node test[k]
    labels = np.where(onehot.any(axis=1), onehot.argmax(axis=1), -1).astype(np.int64)
    pairs = {(min(u, v), max(u, v)) for u, vs in part["graph"].items() for v in vs if u != v}
    edges = np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2)
    ny = len(part["y"])
    return dict(features=features, labels=labels, edges=edges, idx_train=np.arange(ny, dtype=np.int64),
                idx_val=np.arange(ny, ny + 500, dtype=np.int64), idx_test=order)


def build_citeseer_npz(files: dict[str, str], out: str) -> None:
    import numpy as np

    with open(out, "wb") as f:
        # numpy's stub: keyword arrays could fill its allow_pickle parameter (these are named after the parts)
        np.savez_compressed(f, **assemble_citeseer(files))  # type: ignore[arg-type]


BUILDERS = {"phishing.csv": lambda files, out: build_phishing_csv(files["Training_Dataset.arff"], out),
            "citeseer_planetoid.npz": build_citeseer_npz}


# ----- fetching --------------------------------------------------------------------------------------------

def _download(url: str, dest: str, label: str, progress: bool) -> None:
    req = urllib.request.Request(url, headers={"User-Agent": "sqm-vfl data fetcher"})
    with urllib.request.urlopen(req, timeout=60) as r, open(dest, "wb") as out:
        total = int(r.headers.get("Content-Length") or 0) or None
        bar = make_bar(total=total, unit="B", unit_scale=True, desc=label, disable=not progress)
        try:
            for block in iter(lambda: r.read(1 << 16), b""):
                out.write(block)
                bar.update(len(block))
        finally:
            bar.close()


def _drop_first_line(path: str) -> None:
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[data.find(b"\n") + 1:])


def _sources(ds: RealDataset, f: DataFile, mirror: str | None) -> tuple[Source, ...]:
    if mirror:
        return (Source(f"{mirror.rstrip('/')}/{ds.folder}/{f.name}"),)
    return f.sources


def _get(ds: RealDataset, f: DataFile, dest: str, mirror: str | None, progress: bool) -> None:
    """Download ``f`` to ``dest`` from its first source that serves the registry's bytes; else raise (a
    checksum mismatch before a download error: it names the file and both digests)."""
    failures, mismatch = [], None
    for src in _sources(ds, f, mirror):
        try:
            _download(src.url, dest, f"{ds.folder}/{f.name}", progress)
            if src.drop_first_line:
                _drop_first_line(dest)
            verify_file(dest, f, f" (downloaded from {src.url})")
            return
        except ChecksumError as e:
            mismatch = mismatch or ChecksumError(f"{ds.folder}/{f.name}", e.expected, e.actual,
                                                 f" (downloaded from {src.url})")
        except (OSError, urllib.error.URLError) as e:
            failures.append(f"{src.url}: {e}")
        if os.path.exists(dest):
            os.remove(dest)
    if mismatch:
        raise mismatch
    raise OSError(f"could not download {ds.folder}/{f.name}: " + "; ".join(failures))


def status(name: str, data_home: str | None = None) -> dict[str, str]:
    """Each file of the dataset ``name`` in the data home: ``missing``, ``verified`` or ``MISMATCH``."""
    ds = dataset_info(name)
    folder = os.path.join(_home(data_home), ds.folder)
    out = {}
    for f in ds.files:
        p = os.path.join(folder, f.name)
        if not os.path.isfile(p):
            out[f.name] = "missing"
        else:
            try:
                verify_file(p, f)
                out[f.name] = "verified"
            except ChecksumError:
                out[f.name] = "MISMATCH"
    return out


def fetch(name: str, data_home: str | None = None, download_if_missing: bool = True, progress: bool = True,
          mirror: str | None = None) -> str:
    """The folder of the dataset ``name`` in the data home, every file verified against the registry.

    Files already there are verified (a mismatch raises :class:`ChecksumError`; delete the file and fetch
    again); missing ones are downloaded (``download_if_missing``; else :class:`DataMissing` saying how to fetch
    them) from ``mirror`` (else ``$SQM_DATA_MIRROR``, else the public sources) into a temporary folder in the
    data home, verified, built where a file is built from others, and only then renamed into the dataset's
    folder: a failed fetch leaves nothing behind.  ``progress``: a progress bar per download (stderr)."""
    ds = dataset_info(name)
    home = _home(data_home)
    folder = os.path.join(home, ds.folder)
    have = {f.name: os.path.join(folder, f.name) for f in ds.files if os.path.isfile(os.path.join(folder, f.name))}
    for f in ds.files:
        if f.name in have:
            verify_file(have[f.name], f)
    missing = [f for f in ds.files if f.name not in have]
    if not missing:
        return folder
    if not download_if_missing:
        raise DataMissing(
            f"dataset {ds.name} is not in the data home {home} (missing {', '.join(f.name for f in missing)}): "
            f"run `sqm data fetch {ds.folder}`, or point --data-home or ${ENV_HOME} at a folder that holds it")
    mirror = mirror or os.environ.get(ENV_MIRROR) or None
    os.makedirs(home, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{ds.folder}-fetch-", dir=home)
    try:
        paths = dict(have)
        for f in missing:
            if not f.built_from:
                paths[f.name] = os.path.join(staging, f.name)
                _get(ds, f, paths[f.name], mirror, progress)
        for f in missing:
            if f.built_from:
                paths[f.name] = os.path.join(staging, f.name)
                BUILDERS[f.name]({k: paths[k] for k in f.built_from}, paths[f.name])
                verify_file(paths[f.name], f, f" (built from {', '.join(f.built_from)})")
        os.makedirs(folder, exist_ok=True)
        for f in missing:
            os.replace(paths[f.name], os.path.join(folder, f.name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def _fetcher(name: str):
    def fetch_one(data_home: str | None = None, download_if_missing: bool = True, progress: bool = True,
                  mirror: str | None = None) -> str:
        return fetch(name, data_home, download_if_missing, progress, mirror)
    fetch_one.__name__ = fetch_one.__qualname__ = f"fetch_{name}"
    fetch_one.__doc__ = f"The folder of {REGISTRY[name].about} in the data home: :func:`fetch` of {name!r}."
    return fetch_one


fetch_adult, fetch_credit_default = _fetcher("adult"), _fetcher("credit_default")
fetch_phishing, fetch_citeseer = _fetcher("phishing"), _fetcher("citeseer")
