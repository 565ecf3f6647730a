"""sqm.data.datahome and ``sqm data``: the data home, the registry's checksums, fetching without the internet (a
loopback HTTP server in a thread and file:// URLs serving copies), CiteSeer's assembly, the restricted unpickler.

Tests marked by the ``real_dataset`` fixture read the real data from the data home (skipped without it, failed
under ``$SQM_REQUIRE_DATA=1``); the others build a small dataset of their own and need no data home at all."""
from __future__ import annotations

import functools
import hashlib
import http.server
import os
import pickle
import shutil
import threading

import numpy as np
import pytest

from sqm.data import datahome
from sqm.data.datahome import ChecksumError, DataFile, DataMissing, RealDataset, Source, data_home, fetch


@pytest.fixture
def server():
    """A loopback HTTP server in a thread: ``server(folder)`` serves ``folder`` and returns its base URL."""
    started = []

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    def serve(folder) -> str:
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
        threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
        started.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}"
    yield serve
    for httpd in started:
        httpd.shutdown()
        httpd.server_close()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


A = b"".join(b"%d,%d\n" % (i, i * i) for i in range(40000))  # ~0.5 MB: the progress bar has something to show
B = b"x,y\n1,2\n3,4\n"


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A dataset 'toy' in the registry (a.csv; b.csv, published with an extra first line), its published copy
    under ``tmp_path/pub`` and an empty data home ``tmp_path/home`` (also $SQM_DATA); no mirror variable."""
    pub = tmp_path / "pub" / "toy"
    pub.mkdir(parents=True)
    (pub / "a.csv").write_bytes(A)
    (pub / "b.csv").write_bytes(B)
    (pub / "b-with-header.csv").write_bytes(b"# a header someone added\n" + B)
    ds = RealDataset("toy", "toy", (DataFile("a.csv", _sha(A), len(A), (Source("unused"),)),
                                    DataFile("b.csv", _sha(B), len(B), (Source("unused"),))), "a toy")
    monkeypatch.setitem(datahome.REGISTRY, "toy", ds)
    monkeypatch.setenv("SQM_DATA", str(tmp_path / "home"))
    monkeypatch.delenv("SQM_DATA_MIRROR", raising=False)
    return tmp_path


def test_data_home_order_and_never_created(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("SQM_DATA", raising=False)
    assert data_home() == str(tmp_path / "sqm_data")
    monkeypatch.setenv("SQM_DATA", str(tmp_path / "env"))
    assert data_home() == str(tmp_path / "env")
    assert data_home("~/arg") == str(tmp_path / "arg")  # the argument first, ~ expanded
    assert os.listdir(tmp_path) == []  # resolving never creates a folder


@pytest.fixture
def bars():
    """tqdm's bars installed as the face installs them (the library alone shows none), and the silent default
    restored after."""
    from sqm.cli import progress
    from sqm.framework.progress import set_bar_factory

    progress.install()
    yield
    set_bar_factory(None)


def test_fetch_over_loopback_http_with_progress(toy, server, capsys, bars):
    folder = fetch("toy", mirror=server(toy / "pub"))
    assert folder == str(toy / "home" / "toy")
    assert (toy / "home" / "toy" / "a.csv").read_bytes() == A and (toy / "home" / "toy" / "b.csv").read_bytes() == B
    assert os.listdir(toy / "home") == ["toy"]  # no staging folder left
    err = capsys.readouterr().err
    assert "toy/a.csv" in err and "100%" in err  # the progress bar
    assert fetch("toy", download_if_missing=False, progress=False) == folder  # then found and verified


def test_the_library_alone_shows_no_progress_bar(toy, server, capsys):
    from sqm.framework.progress import NullBar, make_bar, set_bar_factory

    set_bar_factory(None)
    assert isinstance(make_bar(total=3), NullBar)
    fetch("toy", mirror=server(toy / "pub"))
    assert "toy/a.csv" not in capsys.readouterr().err


def test_fetch_public_sources_in_order_and_first_line_dropped(toy, server, monkeypatch, capsys):
    base = server(toy / "pub")
    ds = datahome.REGISTRY["toy"]
    sources = {"a.csv": (Source(f"{base}/toy/nowhere.csv"), Source(f"{base}/toy/a.csv")),  # a 404, then the file
               "b.csv": (Source(f"{base}/toy/b-with-header.csv", drop_first_line=True),)}
    files = tuple(DataFile(f.name, f.sha256, f.size, sources[f.name]) for f in ds.files)
    monkeypatch.setitem(datahome.REGISTRY, "toy", RealDataset("toy", "toy", files, "a toy"))
    fetch("toy", progress=False)
    assert (toy / "home" / "toy" / "b.csv").read_bytes() == B
    assert capsys.readouterr().err == ""  # progress=False: no bar


def test_fetch_from_file_url_via_environment(toy, monkeypatch):
    monkeypatch.setenv("SQM_DATA_MIRROR", (toy / "pub").as_uri())
    fetch("toy", progress=False)
    assert (toy / "home" / "toy" / "a.csv").read_bytes() == A


def test_corrupted_download_is_refused_and_leaves_nothing(toy, server):
    (toy / "pub" / "toy" / "b.csv").write_bytes(B.replace(b"3", b"8"))
    with pytest.raises(ChecksumError) as err:
        fetch("toy", mirror=server(toy / "pub"), progress=False)
    msg = str(err.value)
    assert "toy/b.csv" in msg and _sha(B) in msg and _sha(B.replace(b"3", b"8")) in msg
    assert os.listdir(toy / "home") == []  # not even a.csv, which was fine: nothing is installed


def test_unreachable_source_names_the_file_and_url(toy):
    with pytest.raises(OSError, match=r"could not download toy/a.csv: http://127.0.0.1:9/toy/a.csv"):
        fetch("toy", mirror="http://127.0.0.1:9", progress=False)  # port 9 (discard): nothing listens
    assert os.listdir(toy / "home") == []


def test_missing_without_download_says_how_to_fetch(toy):
    with pytest.raises(DataMissing, match=r"missing a.csv, b.csv\): run `sqm data fetch toy`"):
        fetch("toy", download_if_missing=False)
    assert not (toy / "home").exists()  # reading never creates the data home


def test_a_tampered_file_in_the_data_home_is_never_used(toy):
    fetch("toy", mirror=(toy / "pub").as_uri(), progress=False)
    (toy / "home" / "toy" / "a.csv").write_bytes(A[:-1])
    with pytest.raises(ChecksumError, match=r"toy/a.csv: SHA-256 expected " + _sha(A)):
        fetch("toy", download_if_missing=False)


def test_load_dataset_without_data_says_sqm_data_fetch(tmp_path, monkeypatch):
    from sqm.data.datasets import load_dataset

    monkeypatch.setenv("SQM_DATA", str(tmp_path / "none"))
    for name, cmd in (("adult", "adult"), ("credit_default", "credit-default"), ("phishing", "phishing"),
                      ("citeseer", "citeseer")):
        with pytest.raises(ValueError, match=f"run `sqm data fetch {cmd}`"):
            load_dataset(name)
    with pytest.raises(ValueError, match="phishing.*not found at .*: run `sqm data fetch phishing`"):
        load_dataset("phishing", str(tmp_path))  # an explicit path without the file
    with pytest.raises(DataMissing, match="dataset citeseer is not in the data home"):
        datahome.fetch_citeseer(download_if_missing=False)  # scikit-learn style: one fetch_* per dataset


def test_an_unreadable_npz_is_a_mismatch(tmp_path):
    f = datahome.REGISTRY["citeseer"].files[-1]
    for name, data in (("truncated.npz", b"PK\x03\x04" + bytes(100)), ("pickle.npz", pickle.dumps([1]))):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ChecksumError, match=f"{name}: SHA-256 expected {f.sha256}, got \\(unreadable"):
            datahome.verify_file(str(tmp_path / name), f)


def test_unpickler_refuses_other_globals(tmp_path):
    class Evil:
        def __reduce__(self):
            return os.system, ("echo pwned",)

    p = tmp_path / "ind.citeseer.x"
    p.write_bytes(pickle.dumps(Evil(), protocol=2))
    with pytest.raises(pickle.UnpicklingError, match="refused global (posix|nt).system"):
        datahome._unpickle(str(p))


def _cli(argv) -> int:
    from sqm.cli.command import main

    return main(argv)


def test_cli_fetch_list_verify_path(toy, capsys):
    home = str(toy / "home")
    assert _cli(["data", "fetch", "toy", "--mirror", (toy / "pub").as_uri(), "--quiet"]) == 0
    assert _cli(["data", "path", "toy", "--data-home", home]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == os.path.join(home, "toy")
    assert _cli(["data", "list"]) == 0
    assert [ln.split()[:2] + ln.split()[4:5] for ln in capsys.readouterr().out.splitlines() if "toy" in ln] == \
        [["toy", "2", "verified"]]
    (toy / "home" / "toy" / "b.csv").write_bytes(b"tampered")
    assert _cli(["data", "verify"]) == 6
    out = capsys.readouterr()
    assert "toy/a.csv: verified" in out.out and "toy/b.csv: MISMATCH" in out.out
    assert "b.csv" in out.err and _sha(b"tampered") in out.err and "sqm data fetch toy" in out.err
    os.remove(toy / "home" / "toy" / "b.csv")
    assert _cli(["data", "verify", "toy"]) == 6 and "toy/b.csv is missing" in capsys.readouterr().err
    assert _cli(["data", "fetch", "nope"]) == 2 and "unknown dataset 'nope'" in capsys.readouterr().err


# ----- the real datasets (from the data home) ------------------------------------------------------------------

def test_registry_matches_the_real_data_home(real_dataset, capsys):
    for name in datahome.REGISTRY:
        real_dataset(name)  # fetch(download_if_missing=False) verified every file
    assert _cli(["data", "verify"]) == 0
    assert capsys.readouterr().out.count(": verified") == sum(len(d.files) for d in datahome.REGISTRY.values())


def test_citeseer_assembly_gives_the_stored_arrays(real_dataset):
    folder = real_dataset("citeseer")
    built = datahome.assemble_citeseer({f"ind.citeseer.{p}": os.path.join(folder, f"ind.citeseer.{p}")
                                        for p in datahome._CITESEER_IND})
    with np.load(os.path.join(folder, "citeseer_planetoid.npz"), allow_pickle=False) as stored:
        assert sorted(stored.files) == sorted(built)
        for k in stored.files:
            assert stored[k].dtype == built[k].dtype and np.array_equal(stored[k], built[k]), k


def test_fetch_citeseer_and_phishing_from_a_mirror_builds_the_rest(real_dataset, server, tmp_path):
    """Only the published files are served (no npz, no csv): the built ones verify against the registry."""
    pub = tmp_path / "pub"
    for name in ("citeseer", "phishing"):
        ds = datahome.REGISTRY[name]
        (pub / ds.folder).mkdir(parents=True)
        for f in ds.files:
            if not f.built_from:
                shutil.copy(os.path.join(real_dataset(name), f.name), pub / ds.folder / f.name)
    base, home = server(pub), str(tmp_path / "home")
    for name in ("citeseer", "phishing"):
        folder = fetch(name, home, progress=False, mirror=base)
        assert sorted(os.listdir(folder)) == sorted(f.name for f in datahome.REGISTRY[name].files)
    assert sorted(os.listdir(home)) == ["citeseer", "phishing"]
    with open(os.path.join(home, "phishing", "phishing.csv"), "rb") as f:
        assert _sha(f.read()) == datahome.REGISTRY["phishing"].files[1].sha256  # byte for byte


def test_load_dataset_reads_the_data_home(real_dataset):
    from sqm.data.datasets import load_dataset

    real_dataset("phishing")
    real_dataset("citeseer")
    phishing, citeseer = load_dataset("phishing"), load_dataset("citeseer")
    assert phishing.X.shape == (11055, 30) and int(phishing.y.sum()) == 6157
    assert citeseer.X.shape == (2110, 3703)  # the paper's largest connected component
