"""TLS identities of a job's parties: a certificate authority and one certificate per party naming it.

    python -m sqm.runtime.certs --parties 4 --job census-2024 --out certs/

writes (with the ``cryptography`` package) a certificate authority (``mpyc_ca.crt``, ``mpyc_ca.key``) and, for
each party i, ``party_i.key`` and ``party_i.crt`` signed by it.  Party i's certificate names the party and
the job: subject alternative names ``URI:sqm://<job>/party/<i>`` and ``DNS:party-<i>.<job>.sqm`` (common
name ``MPyC party <i>``).  Give party i only ``mpyc_ca.crt``, ``party_i.crt`` and ``party_i.key`` (keep
``mpyc_ca.key`` offline: it is written to the subfolder ``authority/``, apart from the party keys, and no party
reads it at run time); key files are written owner-only (0600), and a party refuses its own private key when
others may read it (naming the ``chmod`` that fixes it).

On every connection both ends check the peer's certificate: signed by the job's authority, naming exactly
the party the peer claims (or is expected) to be, and the same job name (:func:`check_peer`).  An insider
holding one party's key therefore cannot act as another party, nor as a party of another job.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import ssl
import sys

from .errors import RefusedError
from .errors import UsageError

CA_CRT, CA_KEY = "mpyc_ca.crt", "mpyc_ca.key"
AUTHORITY_DIR = "authority"  # the CA key's own subfolder: apart from the party keys, never read at run time
DEFAULT_JOB = "sqm"
_JOB_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_URI_RE = re.compile(r"sqm://([^/]+)/party/([0-9]{1,5})")


class IdentityError(RefusedError, ValueError):
    """A certificate that does not name the party (or the job) it should."""


def check_job_name(job: str) -> str:
    """A job name usable in a certificate: lowercase letters, digits and inner hyphens, 1-63 characters."""
    if not isinstance(job, str) or not _JOB_RE.fullmatch(job):
        raise UsageError(f"job name {job!r} is not usable in certificates: use 1-63 lowercase letters, digits "
                         f"and inner hyphens (e.g. 'census-2024')")
    return job


def party_files(i: int) -> tuple[str, str]:
    return f"party_{i}.crt", f"party_{i}.key"


def _write(path: str, data: bytes, private: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    if private:
        os.chmod(path, 0o600)  # an existing file keeps its old mode through O_CREAT


def make_certificates(out: str, n_parties: int, days: int = 365, job: str = DEFAULT_JOB,
                      ca_dir: str | None = None) -> list[str]:
    """Make a CA and one key/certificate pair per party of job ``job`` in ``out``; return the files written.

    ``ca_dir``: sign with the authority already in that folder (``mpyc_ca.crt``, ``mpyc_ca.key``, e.g. one
    organisation's CA for many jobs) instead of making a new one; the job names keep the jobs apart."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if n_parties < 2:
        raise UsageError(f"need at least 2 parties, got {n_parties}")
    check_job_name(job)
    os.makedirs(out, mode=0o700, exist_ok=True)  # a new key folder is owner-only
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)

    def pem_key(k) -> bytes:
        return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                               serialization.NoEncryption())

    if ca_dir is not None:
        ca_key_path = os.path.join(ca_dir, AUTHORITY_DIR, CA_KEY)
        if not os.path.isfile(ca_key_path):
            ca_key_path = os.path.join(ca_dir, CA_KEY)  # an authority folder of its own, or an older layout
        with open(ca_key_path, "rb") as f:
            ca_key = serialization.load_pem_private_key(f.read(), password=None)
        with open(os.path.join(ca_dir, CA_CRT), "rb") as f:
            ca = x509.load_pem_x509_certificate(f.read())
        ca_name = ca.subject
        files = []
        if os.path.abspath(ca_dir) != os.path.abspath(out):
            _write(os.path.join(out, CA_CRT), ca.public_bytes(serialization.Encoding.PEM), private=False)
            files = [CA_CRT]
    else:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"sqm CA of job {job}")])
        ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
              .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
              .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
              .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                             critical=True)
              .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
              .sign(ca_key, hashes.SHA256()))
        os.makedirs(os.path.join(out, AUTHORITY_DIR), mode=0o700, exist_ok=True)
        _write(os.path.join(out, AUTHORITY_DIR, CA_KEY), pem_key(ca_key), private=True)
        _write(os.path.join(out, CA_CRT), ca.public_bytes(serialization.Encoding.PEM), private=False)
        files = [CA_CRT, os.path.join(AUTHORITY_DIR, CA_KEY)]
    for i in range(n_parties):
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"MPyC party {i}"),
                          x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, f"sqm job {job}")])
        san = x509.SubjectAlternativeName([x509.UniformResourceIdentifier(f"sqm://{job}/party/{i}"),
                                           x509.DNSName(f"party-{i}.{job}.sqm")])
        crt = (x509.CertificateBuilder().subject_name(name).issuer_name(ca_name).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(san, critical=False)
               .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False),
                              critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                     ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                              critical=False)
               .sign(ca_key, hashes.SHA256()))
        crt_file, key_file = party_files(i)
        _write(os.path.join(out, key_file), pem_key(key), private=True)
        _write(os.path.join(out, crt_file), crt.public_bytes(serialization.Encoding.PEM), private=False)
        files += [key_file, crt_file]
    return files


# ----- reading identities -------------------------------------------------------------------------------------
def _from_names(uris, dns) -> tuple[str, int]:
    """(job, party index) from a certificate's URI and DNS subject alternative names."""
    found = {(m.group(1), int(m.group(2))) for m in (_URI_RE.fullmatch(u) for u in uris) if m}
    if len(found) != 1:
        raise IdentityError("a certificate naming no single sqm party (no 'sqm://<job>/party/<i>' name: not made "
                            "by python -m sqm.runtime.certs of this version?)")
    job, index = found.pop()
    if f"party-{index}.{job}.sqm" not in dns:
        raise IdentityError(f"a certificate whose names disagree (URI of party {index} of job {job!r} without "
                            f"the matching DNS name)")
    return job, index


def peer_identity(peercert: dict | None) -> tuple[str, int]:
    """(job, party index) named by a verified peer certificate (``ssl.SSLSocket.getpeercert()`` form)."""
    if not peercert:
        raise IdentityError("no certificate")
    san = peercert.get("subjectAltName", ())
    return _from_names([v for k, v in san if k == "URI"], [v for k, v in san if k == "DNS"])


def file_identity(path: str) -> tuple[str, int]:
    """(job, party index) named by a PEM certificate file."""
    from cryptography import x509

    with open(path, "rb") as f:
        crt = x509.load_pem_x509_certificate(f.read())
    try:
        san = crt.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        raise IdentityError(f"{path}: a certificate naming no sqm party (no subject alternative names)") from None
    try:
        return _from_names(san.get_values_for_type(x509.UniformResourceIdentifier),
                           san.get_values_for_type(x509.DNSName))
    except IdentityError as e:
        raise IdentityError(f"{path}: {e}") from None


def _party(i: int) -> str:
    return "the server (party 0)" if i == 0 else f"client {i} (party {i})"


def check_peer(peercert: dict | None, pid: int, job: str) -> None:
    """Refuse (IdentityError saying what is wrong) a peer certificate not naming party ``pid`` of ``job``."""
    try:
        their_job, index = peer_identity(peercert)
    except IdentityError as e:
        raise IdentityError(f"{_party(pid)} presented {e}") from None
    if their_job != job:
        raise IdentityError(f"{_party(pid)} presented a certificate of job {their_job!r} (this job is {job!r})")
    if index != pid:
        raise IdentityError(f"{_party(pid)} presented the certificate of {_party(index)}")


class TLSIdentity:
    """Party ``index``'s keys in ``ssl_dir`` (``mpyc_ca.crt``, ``party_<index>.crt``, ``party_<index>.key``).

    Checks that its own certificate names party ``index`` (and ``job`` if given; else the job it names is
    the job this party expects every peer's certificate to name), and makes the TLS contexts: TLS 1.3,
    certificates required both ways, trusting only the job's authority (never the system's)."""

    def __init__(self, ssl_dir: str, index: int, job: str | None = None):
        self.dir = os.path.abspath(ssl_dir)
        crt, key = party_files(index)
        need = [CA_CRT, crt, key]
        missing = [n for n in need if not os.path.isfile(os.path.join(self.dir, n))]
        if missing:
            raise IdentityError(f"TLS needs {', '.join(missing)} in {self.dir} (make them with python -m sqm.runtime.certs)")
        self.ca, self.crt, self.key = (os.path.join(self.dir, n) for n in need)
        check_private_file(self.key, "its private key")
        own_job, own = file_identity(self.crt)
        if own != index:
            raise IdentityError(f"{self.crt} is the certificate of {_party(own)}, not of {_party(index)}")
        if job is not None and own_job != job:
            raise IdentityError(f"{self.crt} is a certificate of job {own_job!r}, but this party runs job {job!r} "
                                f"(make keys with python -m sqm.runtime.certs --job {job})")
        self.index, self.job = index, own_job

    def _context(self, purpose) -> ssl.SSLContext:
        ctx = ssl.SSLContext(purpose)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.load_cert_chain(self.crt, self.key)
        ctx.load_verify_locations(cafile=self.ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def server_context(self) -> ssl.SSLContext:
        return self._context(ssl.PROTOCOL_TLS_SERVER)

    def client_context(self) -> ssl.SSLContext:
        ctx = self._context(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False  # the peer's party and job are checked by check_peer, naming what differs
        return ctx


def check_private_file(path: str, what: str) -> None:
    """IdentityError when ``path`` (a private key) may be read or written by anyone but its owner (POSIX modes),
    naming the fix."""
    if os.name != "posix":
        return
    mode = os.stat(path).st_mode & 0o777
    if mode & 0o077:
        raise IdentityError(f"{path} ({what}) is readable or writable by others (mode {mode:04o}): refused; "
                            f"run chmod 600 {path}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sqm.runtime.certs", description=__doc__.splitlines()[0])
    ap.add_argument("--parties", type=int, required=True, help="number of parties M (server + clients)")
    ap.add_argument("--out", required=True, help="folder to write the CA and the parties' keys into")
    ap.add_argument("--job", default=DEFAULT_JOB,
                    help=f"the job's name, written into every certificate (default {DEFAULT_JOB!r}); a party "
                         f"refuses peers whose certificate names another job")
    ap.add_argument("--days", type=int, default=365, help="certificate validity in days (default 365)")
    ap.add_argument("--ca", metavar="DIR", help="sign with the authority in DIR (mpyc_ca.crt, and mpyc_ca.key "
                                                "in DIR/authority or DIR) "
                                                "instead of making a new one")
    args = ap.parse_args(argv)
    try:
        files = make_certificates(args.out, args.parties, args.days, args.job, args.ca)
    except (ValueError, OSError) as e:
        print(f"sqm.runtime.certs: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {len(files)} files for job {args.job!r} to {args.out}: give party i mpyc_ca.crt, party_i.crt "
          f"and party_i.key only; keep {AUTHORITY_DIR}/{CA_KEY} offline (no party needs it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
