"""Keys without a dealer (issue 43, item 5): each organisation makes its own private key and a certificate signing
request (``sqm keys request``), the authority checks and signs requests (``sqm keys sign``) and never sees a
private key; a job file may pin each party's public key (``"fingerprint"``), so that a second certificate the
authority mints for a party is refused by every peer (real party processes over loopback TLS)."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from test_tls import Parties

from sqm.cli.command import main
from sqm.framework.runners import run_one
from sqm.framework.spec import load_job, write_job, write_party_csvs
from sqm.apps.pca import PCAJobTask
from sqm.mpc.net.certs import IdentityError, TLSIdentity, format_pins, parse_pins
from sqm.errors import UsageError
from sqm.errors import EXIT_REFUSED
from sqm.mpc.net.keys import check_folder, fingerprint, make_authority, make_request, sign_request
from sqm.mpc.net.session import differences, job_description

JOB = "three-orgs"


def keys(capsys, *args) -> str:
    """``sqm keys ARGS`` as its user runs it; its printed lines (exit 0 asserted)."""
    assert main(["keys", *args]) == 0
    return capsys.readouterr().out


def organisations(tmp_path, capsys, n=3, job=JOB):
    """The dealer-free steps: the authority makes its key; each organisation makes its own key and request in
    its own folder; only the request travels to the authority, which signs it; the certificate and the
    authority's certificate travel back.  Returns (authority folder, [each organisation's key folder], pins)."""
    ca = tmp_path / "authority-host" / "ca"
    out = keys(capsys, "authority", "--out", str(ca))
    assert "keep" in out and "authority" in out
    inbox = tmp_path / "authority-host" / "inbox"
    inbox.mkdir()
    folders, pins = [], []
    for i in range(n):
        mine = tmp_path / f"org{i}-host" / "keys"
        out = keys(capsys, "request", "--job", job, "--party", str(i), "--out", str(mine))
        assert f"{mine}/party_{i}.key" in out and "send only this .csr" in out
        shutil.copy(mine / f"party_{i}.csr", inbox)  # the only file that leaves the organisation
        out = keys(capsys, "sign", "--authority", str(ca), "--job", job, "--party", str(i),
                   str(inbox / f"party_{i}.csr"))
        pin = re.search(r"sha256:[0-9a-f]{64}", out).group(0)
        shutil.copy(inbox / f"party_{i}.crt", mine)  # back to the organisation, with the authority's certificate
        shutil.copy(ca / "mpyc_ca.crt", mine)
        assert keys(capsys, "fingerprint", str(mine / f"party_{i}.crt")).strip() == pin
        assert keys(capsys, "check", "--ssl-dir", str(mine), "--party", str(i), "--job", job).startswith("OK: ")
        folders.append(str(mine))
        pins.append(pin)
    return str(ca), folders, pins


def private_key_files(root) -> list[str]:
    found = []
    for d, _, files in os.walk(root):
        for f in files:
            if b"PRIVATE KEY" in Path(os.path.join(d, f)).read_bytes():
                found.append(os.path.relpath(os.path.join(d, f), root))
    return sorted(found)


def test_three_organisations_make_their_own_keys_and_run_a_pinned_job(tmp_path, capsys):
    """Three organisations, three folders, one authority: a real PCA job over TLS between those folders, with
    every key pinned in the job file, completes.  No private key exists outside its owner's folder (the
    authority's own aside), and no request holds private key material."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    ca, folders, pins = organisations(tmp_path, capsys)
    private_key_files_before = private_key_files(tmp_path)
    assert private_key_files_before == ["authority-host/ca/authority/mpyc_ca.key", "org0-host/keys/party_0.key",
                                           "org1-host/keys/party_1.key", "org2-host/keys/party_2.key"]
    for i, d in enumerate(folders):
        assert os.stat(d).st_mode & 0o777 == 0o700 and os.stat(f"{d}/party_{i}.key").st_mode & 0o777 == 0o600
        key = serialization.load_pem_private_key(Path(f"{d}/party_{i}.key").read_bytes(), None)
        secret = key.private_numbers().private_value.to_bytes(32, "big")
        csr = Path(f"{d}/party_{i}.csr").read_bytes()
        raw = x509.load_pem_x509_csr(csr).public_bytes(serialization.Encoding.DER)
        assert secret not in raw and secret not in csr and b"PRIVATE" not in csr
    assert os.stat(f"{ca}/authority").st_mode & 0o777 == 0o700

    X = np.random.default_rng(0).normal(size=(30, 6)) / 4
    data = tmp_path / "job"
    plain = load_job(write_party_csvs(X, data, 2, min_intersection=1))
    path = write_job(str(data / "pinned.json"), plain.addresses, [p.file for p in plain.parties[1:]],
                     name=JOB, min_intersection=1, fingerprints=pins)
    spec = load_job(path)
    assert spec.pins == dict(enumerate(pins))
    assert json.loads(Path(path).read_text())["parties"][1]["fingerprint"] == pins[1]
    task = PCAJobTask(n_components=2, epsilon=1.0, delta=1e-5, gamma=1024.0)
    out: dict = {}

    def go(i):
        try:
            out[i] = run_one(spec, i, task, timeout=120, connect_timeout=60, ssl_dir=folders[i])
        except Exception as e:  # noqa: BLE001
            out[i] = e

    threads = [threading.Thread(target=go, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(out[i], dict) for i in range(3)), out
    assert np.shape(out[0]["result"]["components"]) == (2, 6) and out[0]["result"]["n_records"] == 30
    assert private_key_files(tmp_path) == private_key_files_before  # the job copied no key anywhere


def _request(tmp_path, name, job, i, extensions=(), subject=None):
    """A request made with the cryptography package directly (what a hostile requester could send)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from sqm.mpc.net.certs import party_subject

    key = ec.generate_private_key(ec.SECP256R1())
    b = x509.CertificateSigningRequestBuilder().subject_name(subject or party_subject(job, i))
    for ext in extensions:
        b = b.add_extension(ext, critical=False)
    path = tmp_path / name
    path.write_bytes(b.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
    return str(path)


def test_sign_refuses_a_request_that_names_anything_else(tmp_path, capsys):
    from cryptography import x509

    from sqm.mpc.net.certs import party_names

    ca = str(tmp_path / "ca")
    make_authority(ca)
    _, other_party = make_request(str(tmp_path / "p2"), "alpha", 2)
    _, other_job = make_request(str(tmp_path / "beta1"), "beta", 1)
    _, good = make_request(str(tmp_path / "p1"), "alpha", 1)
    names = list(party_names("alpha", 1))
    extra = _request(tmp_path, "extra.csr", "alpha", 1,
                     [x509.SubjectAlternativeName(names + [x509.DNSName("bank.example")])])
    two = _request(tmp_path, "two.csr", "alpha", 1, [x509.SubjectAlternativeName(
        names + [x509.UniformResourceIdentifier("sqm://alpha/party/0")])])
    ca_flag = _request(tmp_path, "ca.csr", "alpha", 1, [x509.SubjectAlternativeName(names),
                                                       x509.BasicConstraints(ca=True, path_length=None)])
    broken = tmp_path / "broken.csr"  # one letter of a name changed after signing: same length, valid DER
    from cryptography.hazmat.primitives import serialization

    der = x509.load_pem_x509_csr(Path(good).read_bytes()).public_bytes(serialization.Encoding.DER)
    assert der.count(b"party-1.alpha.sqm") == 1
    forged = x509.load_der_x509_csr(der.replace(b"party-1.alpha.sqm", b"party-0.alpha.sqm"))
    broken.write_bytes(forged.public_bytes(serialization.Encoding.PEM))
    with_key = tmp_path / "with_key.csr"
    with_key.write_bytes((tmp_path / "p1" / "party_1.key").read_bytes() + Path(good).read_bytes())
    cases = [(other_party, "names party 2, not party 1: refused"),
             (other_job, "names job 'beta', not 'alpha': refused"),
             (extra, "names more than party 1 of job 'alpha': DNS:bank.example: refused"),
             (two, "names more than party 1 of job 'alpha': URI:sqm://alpha/party/0: refused"),
             (ca_flag, "asks for a certificate authority (CA flag): refused"),
             (str(broken), "its signature is broken"),
             (str(with_key), "holds a private key: refused (send only the .csr")]
    for path, message in cases:
        with pytest.raises(IdentityError) as e:
            sign_request(ca, "alpha", 1, path)
        assert str(e.value).startswith(path) and message in str(e.value), (path, str(e.value))
        assert not os.path.exists(path[:-4] + ".crt")
    # on the command line: exit 3 and the same short message
    assert main(["keys", "sign", "--authority", ca, "--job", "alpha", "--party", "1", other_party]) == EXIT_REFUSED
    assert "names party 2, not party 1: refused" in capsys.readouterr().err
    crt, pin = sign_request(ca, "alpha", 1, good)
    assert crt == good[:-4] + ".crt" and pin == fingerprint(good) == fingerprint(crt)


def test_fingerprint_is_the_sha256_of_the_public_key_info(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    make_authority(str(tmp_path / "ca"))
    key, csr = make_request(str(tmp_path / "k"), "alpha", 0)
    crt, pin = sign_request(str(tmp_path / "ca"), "alpha", 0, csr)
    spki = x509.load_pem_x509_certificate(Path(crt).read_bytes()).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert pin == fingerprint(crt) == fingerprint(csr) == "sha256:" + hashlib.sha256(spki).hexdigest()
    with pytest.raises(UsageError, match="holds a private key"):
        fingerprint(key)
    with pytest.raises(UsageError, match="party 0 already has a key here"):
        make_request(str(tmp_path / "k"), "alpha", 0)  # a key is never replaced
    with pytest.raises(UsageError, match="already holds an authority"):
        make_authority(str(tmp_path / "ca"))
    open_dir = tmp_path / "shared"
    open_dir.mkdir(mode=0o755)
    os.chmod(open_dir, 0o755)
    with pytest.raises(UsageError, match=r"is open to others \(mode 0755\)"):
        make_request(str(open_dir), "alpha", 1)
    assert parse_pins(format_pins({2: pin.upper().replace("SHA256", "sha256"), 0: pin})) == {0: pin, 2: pin}
    for bad in ("1=sha1:ab", "x=" + pin, f"1={pin},1={pin}"):
        with pytest.raises(UsageError, match="--pins"):
            parse_pins(bad)


def test_check_names_the_problem(tmp_path):
    ca, other = str(tmp_path / "ca"), str(tmp_path / "other")
    make_authority(ca)
    make_authority(other)
    d = str(tmp_path / "k")
    _, csr = make_request(d, "alpha", 1)
    sign_request(ca, "alpha", 1, csr)
    with pytest.raises(IdentityError, match="lacks mpyc_ca.crt"):
        check_folder(d, 1)
    shutil.copy(f"{ca}/mpyc_ca.crt", d)
    assert check_folder(d, 1, "alpha").startswith(f"OK: {d} holds party 1's key and certificate for job 'alpha'")
    with pytest.raises(IdentityError, match="names job 'alpha', not 'beta'"):
        check_folder(d, 1, "beta")
    os.chmod(f"{d}/party_1.key", 0o640)
    with pytest.raises(IdentityError, match=r"readable or writable by others \(mode 0640\)"):
        check_folder(d, 1)
    os.chmod(f"{d}/party_1.key", 0o600)
    shutil.copy(f"{other}/mpyc_ca.crt", d)
    with pytest.raises(IdentityError, match="is not signed by the authority"):
        check_folder(d, 1)
    shutil.copy(f"{ca}/mpyc_ca.crt", d)
    e = str(tmp_path / "e")
    _, csr2 = make_request(e, "alpha", 1)
    shutil.copy(sign_request(ca, "alpha", 1, csr2)[0], d)  # another key's certificate
    with pytest.raises(IdentityError, match="does not match"):
        check_folder(d, 1)


def test_job_file_pins_are_checked(tmp_path):
    data = tmp_path / "job"
    spec = load_job(write_party_csvs(np.eye(6)[:5] / 2, data, 2, min_intersection=1))
    raw = json.loads(Path(spec.path).read_text())
    raw["parties"][2]["fingerprint"] = "sha256:1234"
    Path(spec.path).write_text(json.dumps(raw))
    with pytest.raises(UsageError, match="client 2's 'fingerprint' must be 'sha256:' and 64 hex digits"):
        load_job(spec.path)
    pin = "sha256:" + "AB" * 32
    raw["parties"][2]["fingerprint"] = pin
    Path(spec.path).write_text(json.dumps(raw))
    assert load_job(spec.path).pins == {2: pin.lower()}


def test_a_party_given_other_pins_is_refused_at_the_agreement():
    a = "3fa2" + "0" * 28
    pin = "sha256:" + "0" * 64
    mine = job_description(a, ["h:1", "h:2", "h:3"], "alpha", "EvaluateJob", {1: pin})
    theirs = job_description(a, ["h:1", "h:2", "h:3"], "alpha", "EvaluateJob")
    assert differences(mine, theirs, "client 2") == [f"client 2 pins no key for client 1 (this party pins {pin})"]


def test_a_rogue_authority_is_stopped_by_a_pin(tmp_path, capsys):
    """The authority mints a second key and certificate for party 1 (it signs a request it made itself).
    Without a pin, an unmodified party holding them is accepted as party 1 by every peer and the job completes
    with it: why a job file should pin keys.  With party 1's real key pinned in the job file, the server and
    client 2 refuse the impostor on connecting, naming client 1 and the pin, and nothing is released; the same
    pinned job with the real party 1 completes."""
    from sqm.mpc.net.launch import new_job_id

    ca, folders, pins = organisations(tmp_path, capsys)
    rogue = str(tmp_path / "authority-host" / "rogue")
    _, csr = make_request(rogue, JOB, 1)
    crt, rogue_pin = sign_request(ca, JOB, 1, csr)
    shutil.copy(f"{ca}/mpyc_ca.crt", rogue)
    assert check_folder(rogue, 1, JOB).startswith("OK")  # a valid certificate of party 1 of this job

    ps = Parties(tmp_path)  # no pin: the impostor is client 1
    job = new_job_id()
    for i, d in ((0, folders[0]), (1, rogue), (2, folders[2])):
        ps.start(i, job, d)
    out = ps.finish()
    assert [out[i][0] for i in range(3)] == [0, 0, 0], out
    assert ps.released() == [0, 1, 2]

    pinned = load_job(write_job(str(tmp_path / "pinned.json"), [f"127.0.0.1:{i}" for i in range(1, 4)],
                                [str(tmp_path / "a.csv"), str(tmp_path / "b.csv")], name=JOB,
                                fingerprints=[None, pins[1], None]))
    assert pinned.pins == {1: pins[1]}
    for f in ps.released():
        os.remove(tmp_path / f"party{f}.result")
    ps = Parties(tmp_path)
    job = new_job_id()
    honest = ["--pins", format_pins(pinned.pins)]
    ps.start(0, job, folders[0], extra=honest)
    ps.start(2, job, folders[2], extra=honest)
    ps.start(1, job, rogue)  # the impostor leaves the pin out (with it, it would not start at all)
    out = ps.finish()
    for i in (0, 2):
        code, msg, _ = out[i]
        assert code == EXIT_REFUSED, out
        assert (f"client 1 (party 1) presented a certificate whose key {rogue_pin} is not the key the job pins for it "
                f"({pins[1]})") in msg, msg
    assert out[1][0] == EXIT_REFUSED and ps.released() == [], out

    ps = Parties(tmp_path)  # the same pins, the real client 1: the job completes
    job = new_job_id()
    for i in range(3):
        ps.start(i, job, folders[i], extra=honest)
    out = ps.finish()
    assert [out[i][0] for i in range(3)] == [0, 0, 0] and ps.released() == [0, 1, 2], out


def test_a_party_whose_certificate_is_not_its_pin_refuses_to_start(tmp_path, capsys):
    ca, folders, pins = organisations(tmp_path, capsys, n=2)
    other = "sha256:" + "ab" * 32
    with pytest.raises(IdentityError) as e:
        TLSIdentity(folders[1], 1, JOB, {1: other})
    assert f"holds the key {pins[1]}, but the job pins {other} for client 1 (party 1): refused to start" in str(e.value)
    assert TLSIdentity(folders[1], 1, JOB, {0: pins[0], 1: pins[1]}).pins == {0: pins[0], 1: pins[1]}
    ps = Parties(tmp_path, 2)  # a real party process: exit 3, naming the pin, before connecting to anyone
    from sqm.mpc.net.launch import new_job_id

    ps.start(1, new_job_id(), folders[1], extra=["--pins", f"1={other}"])
    code, msg, _ = ps.finish(wait=[1])[1]
    assert code == EXIT_REFUSED and f"but the job pins {other} for client 1 (party 1): refused to start" in msg
    assert ps.released() == []


def test_a_party_given_other_pins_is_refused_by_every_party(tmp_path, capsys):
    """Client 2 is given no pins while the others pin client 1's real key: the connections pass (every key is
    right), and the first exchange refuses, naming client 2 and the pin it lacks; nothing is released."""
    from sqm.mpc.net.launch import new_job_id

    ca, folders, pins = organisations(tmp_path, capsys)
    ps, job = Parties(tmp_path), new_job_id()
    for i in range(3):
        ps.start(i, job, folders[i], extra=[] if i == 2 else ["--pins", f"1={pins[1]}"])
    out = ps.finish()
    assert all(out[i][0] == EXIT_REFUSED for i in range(3)), out
    for i in (0, 1):
        assert f"client 2 pins no key for client 1 (this party pins {pins[1]})" in out[i][1], out[i]
    assert ps.released() == []
