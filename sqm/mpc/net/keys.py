"""Keys without a dealer: each organisation makes its own private key, and the authority signs only requests.

The steps (the ``sqm keys`` command runs each; :mod:`sqm.mpc.net.certs` reads what they write):

1. the authority the organisations chose (one of them, or a third party): :func:`make_authority` writes
   ``mpyc_ca.crt`` (for everyone) and its key ``authority/mpyc_ca.key`` (folder 0700, key 0600; it never leaves);
2. each organisation, on its own host: :func:`make_request` writes its private key ``party_<i>.key`` (0600, in an
   owner-only folder; it never leaves) and ``party_<i>.csr``, a request naming exactly its party and the job;
3. the authority: :func:`sign_request` checks a request's signature and that it names exactly that party of that
   job and nothing else (no other name, no CA flag), then writes ``party_<i>.crt``; it never sees a private key;
4. the organisation puts ``mpyc_ca.crt`` and its ``party_<i>.crt`` beside its key and checks the folder
   (:func:`check_folder`); the job file may pin each party's key (:func:`fingerprint`), so that a certificate the
   authority mints for a party behind its back is refused by every peer (:meth:`sqm.mpc.net.certs.TLSIdentity.check`).
"""
from __future__ import annotations

import os

from sqm.mpc.net.certs import (
    AUTHORITY_DIR,
    CA_CRT,
    CA_KEY,
    IdentityError,
    check_job_name,
    check_private_file,
    file_identity,
    key_fingerprint,
    load_authority,
    new_authority,
    not_after,
    party_certificate,
    party_files,
    party_names,
    party_subject,
    pem_private_key,
    public_key_fingerprint,
    write_authority,
    write_file,
    _from_names,
)
from sqm.errors import UsageError

DEFAULT_AUTHORITY_NAME = "sqm authority"


def request_file(i: int) -> str:
    return f"party_{i}.csr"


def _owner_only_folder(out: str) -> None:
    """Make ``out`` (0700) or accept it if it is already owner-only; a folder others may enter is refused."""
    if not os.path.isdir(out):
        os.makedirs(out, mode=0o700)
        os.chmod(out, 0o700)
        return
    mode = os.stat(out).st_mode & 0o777
    if os.name == "posix" and mode & 0o077:
        raise UsageError(f"{out} is open to others (mode {mode:04o}): a private key goes into an owner-only folder; "
                         f"give a new folder, or run chmod 700 {out}")


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(1 << 20)
    except OSError as e:
        raise UsageError(f"cannot read {what} {path}: {e.strerror or e}") from None


def _check_index(i) -> int:
    if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < 65536:
        raise UsageError(f"party index {i!r} must be an integer 0..65535 (0: the server)")
    return i


def make_authority(out: str, days: int = 365, name: str = DEFAULT_AUTHORITY_NAME) -> list[str]:
    """A new authority in ``out``: ``mpyc_ca.crt`` and ``authority/mpyc_ca.key``; returns the files written.  An
    authority already there is never replaced (UsageError)."""
    if not isinstance(name, str) or not name.strip() or not name.isprintable() or len(name) > 64:
        raise UsageError(f"the authority's name must be 1-64 printable characters, got {name!r}")
    if os.path.exists(os.path.join(out, AUTHORITY_DIR, CA_KEY)) or os.path.exists(os.path.join(out, CA_CRT)):
        raise UsageError(f"{out} already holds an authority ({CA_CRT}, {AUTHORITY_DIR}/{CA_KEY}): refused to replace "
                         f"it (every certificate it signed would stop working); give another folder")
    if days < 1:
        raise UsageError(f"--days must be at least 1, got {days}")
    os.makedirs(out, mode=0o700, exist_ok=True)
    key, crt = new_authority(name, days)
    return write_authority(out, key, crt)


def make_request(out: str, job: str, i: int) -> tuple[str, str]:
    """Party ``i``'s own private key (``out/party_<i>.key``, 0600; ``out`` owner-only) and its certificate signing
    request for job ``job`` (``out/party_<i>.csr``); returns both paths.  An existing key is never replaced."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    check_job_name(job)
    _check_index(i)
    _owner_only_folder(out)
    key_path = os.path.join(out, party_files(i)[1])
    if os.path.exists(key_path):
        raise UsageError(f"{key_path} exists: party {i} already has a key here (refused to replace it; remove it "
                         f"first to make a new one)")
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (x509.CertificateSigningRequestBuilder().subject_name(party_subject(job, i))
           .add_extension(party_names(job, i), critical=False)
           .sign(key, hashes.SHA256()))
    csr_path = os.path.join(out, request_file(i))
    write_file(key_path, pem_private_key(key), private=True)
    write_file(csr_path, csr.public_bytes(serialization.Encoding.PEM), private=False)
    return key_path, csr_path


def _names(san) -> list[str]:
    """Every name of a subject alternative name extension, as ``TYPE:value``."""
    from cryptography import x509

    kinds: dict[type, str] = {x509.UniformResourceIdentifier: "URI", x509.DNSName: "DNS", x509.RFC822Name: "email",
             x509.IPAddress: "IP", x509.DirectoryName: "dirName", x509.RegisteredID: "RID", x509.OtherName: "otherName"}
    return [f"{kinds.get(type(g), type(g).__name__)}:{g.value}" for g in san]


def check_request(data: bytes, job: str, i: int, where: str = "the request"):
    """The certificate signing request in ``data`` (PEM), checked: a valid signature by its own key, exactly the
    names of party ``i`` of job ``job``, no CA flag, a key the runtime accepts.  Returns the request; refuses
    (IdentityError, naming the problem) anything else."""
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    check_job_name(job)
    _check_index(i)
    if b"PRIVATE KEY" in data:
        raise IdentityError(f"{where} holds a private key: refused (send only the .csr; the key stays with its "
                            f"owner, who should now make a new one)")
    try:
        csr = x509.load_pem_x509_csr(data)
    except ValueError:
        raise IdentityError(f"{where} is not a certificate signing request (PEM, from sqm keys request)") from None
    if not csr.is_signature_valid:
        raise IdentityError(f"{where}: its signature is broken (altered after its owner signed it, or not signed "
                            f"with the key it names): refused")
    try:
        bc = csr.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        bc = None
    if bc is not None and bc.ca:
        raise IdentityError(f"{where} asks for a certificate authority (CA flag): refused (a party's certificate "
                            f"signs nothing)")
    try:
        san = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        raise IdentityError(f"{where} names no party (no subject alternative names): refused") from None
    got, want = _names(san), _names(party_names(job, i))
    if got != want:
        extra = [n for n in got if n not in want]
        try:
            their_job, their_i = _from_names(san.get_values_for_type(x509.UniformResourceIdentifier),
                                             san.get_values_for_type(x509.DNSName))
        except IdentityError:
            their_job, their_i = None, None
        if their_job is not None and their_i != i:
            why = f"names party {their_i}, not party {i}"
        elif their_job is not None and their_job != job:
            why = f"names job {their_job!r}, not {job!r}"
        elif extra:
            why = f"names more than party {i} of job {job!r}: {', '.join(extra)}"
        else:
            why = f"lacks names of party {i} of job {job!r}: {', '.join(n for n in want if n not in got)}"
        raise IdentityError(f"{where} {why}: refused")
    want_subject = party_subject(job, i)
    if csr.subject != want_subject:
        raise IdentityError(f"{where} names the subject {csr.subject.rfc4514_string()!r}, not "
                            f"{want_subject.rfc4514_string()!r} (party {i} of job {job!r}): refused")
    pub = csr.public_key()
    ok = (isinstance(pub, ec.EllipticCurvePublicKey) and pub.curve.key_size >= 256) or \
         (isinstance(pub, rsa.RSAPublicKey) and pub.key_size >= 2048)
    if not ok:
        raise IdentityError(f"{where} holds a {type(pub).__name__} key the runtime does not accept (EC P-256 or "
                            f"larger, or RSA of 2048 bits or more): refused")
    return csr


def sign_request(authority: str, job: str, i: int, csr_path: str, out: str | None = None,
                 days: int = 365) -> tuple[str, str]:
    """The authority in ``authority`` signs the request ``csr_path`` of party ``i`` of job ``job``
    (:func:`check_request` first): writes the certificate to ``out`` (default: the request's path with ``.crt``);
    returns (its path, the key's fingerprint)."""
    from cryptography.hazmat.primitives import serialization

    if days < 1:
        raise UsageError(f"--days must be at least 1, got {days}")
    data = _read(csr_path, "the signing request")
    csr = check_request(data, job, i, csr_path)
    ca_key, ca = load_authority(authority)
    crt = party_certificate(ca_key, ca, csr.public_key(), job, i, days)
    if out is None:
        base, ext = os.path.splitext(csr_path)
        out = (base if ext == ".csr" else csr_path) + ".crt"
    write_file(out, crt.public_bytes(serialization.Encoding.PEM), private=False)
    return out, key_fingerprint(crt)


def fingerprint(path: str) -> str:
    """``sha256:<hex>`` of the public key in a certificate or a certificate signing request (PEM): the same for a
    request and the certificate signed from it."""
    from cryptography import x509

    data = _read(path, "the certificate")
    if b"PRIVATE KEY" in data:
        raise UsageError(f"{path} holds a private key: give the certificate (.crt) or the request (.csr)")
    for load in (x509.load_pem_x509_certificate, x509.load_pem_x509_csr):
        try:
            return public_key_fingerprint(load(data).public_key())
        except ValueError:
            continue
    raise UsageError(f"{path} is neither a certificate nor a certificate signing request (PEM)")


def check_folder(ssl_dir: str, i: int, job: str | None = None) -> str:
    """Check a party's TLS folder: ``mpyc_ca.crt``, ``party_<i>.crt`` and ``party_<i>.key`` there, the key
    owner-only and matching the certificate, the certificate signed by the authority, valid now, naming party
    ``i`` (and job ``job``).  Returns a one-line summary; raises IdentityError naming the first problem."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    _check_index(i)
    crt_name, key_name = party_files(i)
    paths = {n: os.path.join(ssl_dir, n) for n in (CA_CRT, crt_name, key_name)}
    missing = [n for n, p in paths.items() if not os.path.isfile(p)]
    if missing:
        raise IdentityError(f"{ssl_dir} lacks {', '.join(missing)} (the key from sqm keys request, the certificate "
                            f"the authority signed, and the authority's {CA_CRT})")
    if os.path.exists(os.path.join(ssl_dir, AUTHORITY_DIR, CA_KEY)) or os.path.exists(os.path.join(ssl_dir, CA_KEY)):
        raise IdentityError(f"{ssl_dir} holds the authority's private key ({CA_KEY}): a party's folder holds only "
                            f"{CA_CRT}; keep the authority's key apart")
    check_private_file(paths[key_name], "its private key")
    with open(paths[CA_CRT], "rb") as f:
        ca = x509.load_pem_x509_certificate(f.read())
    with open(paths[crt_name], "rb") as f:
        crt = x509.load_pem_x509_certificate(f.read())
    with open(paths[key_name], "rb") as f:
        key = serialization.load_pem_private_key(f.read(), password=None)
    if public_key_fingerprint(key.public_key()) != key_fingerprint(crt):
        raise IdentityError(f"{paths[key_name]} does not match {paths[crt_name]} (the certificate is for another "
                            f"key)")
    from cryptography.exceptions import InvalidSignature

    try:
        crt.verify_directly_issued_by(ca)
    except (InvalidSignature, ValueError, TypeError) as e:
        raise IdentityError(f"{paths[crt_name]} is not signed by the authority in {paths[CA_CRT]} "
                            f"({type(e).__name__})") from None
    their_job, index = file_identity(paths[crt_name])
    if index != i:
        raise IdentityError(f"{paths[crt_name]} names party {index}, not party {i}")
    if job is not None and their_job != job:
        raise IdentityError(f"{paths[crt_name]} names job {their_job!r}, not {job!r}")
    now = datetime.datetime.now(datetime.UTC)
    for what, c in (("the certificate", crt), ("the authority's certificate", ca)):
        if not_after(c) < now:
            raise IdentityError(f"{what} expired on {not_after(c):%Y-%m-%d}")
    return (f"OK: {ssl_dir} holds party {i}'s key and certificate for job {their_job!r}, signed by the authority "
            f"in {CA_CRT}, valid until {not_after(crt):%Y-%m-%d}; key {key_fingerprint(crt)}")
