"""``sqm keys``: TLS keys without a dealer (:mod:`sqm.mpc.net.keys`).  Each organisation makes its own private key;
the authority the organisations chose signs only certificate signing requests.

    sqm keys authority --out ca/                                   the authority, once: mpyc_ca.crt, authority/ key
    sqm keys request --job NAME --party I --out keys/              each organisation: its key (stays) and party_I.csr
    sqm keys sign --authority ca/ --job NAME --party I party_I.csr the authority: party_I.crt (sent back)
    sqm keys fingerprint party_I.crt                               sha256:<hex>, to pin in the job file
    sqm keys check --ssl-dir keys/ --party I --job NAME            the party's folder, ready to run
"""
from __future__ import annotations

import argparse

AUTHORITY_FILES = "mpyc_ca.crt (for every party) and authority/mpyc_ca.key (0600 in a 0700 folder; it never leaves)"


def register(sub) -> None:
    k = sub.add_parser("keys", help="TLS keys without a dealer: an authority, each party's own key and request, "
                                    "signing, fingerprints",
                       description="TLS keys made by their owners: each organisation makes its own private key and "
                                   "a certificate signing request (CSR) naming its party and the job; the authority "
                                   "the organisations chose checks and signs the request and never sees a private "
                                   "key.  Pin each party's key fingerprint in the job file so that a second "
                                   "certificate the authority might mint for a party is refused by every peer.",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="steps:\n" + "\n".join("  " + ln.strip() for ln in __doc__.splitlines()[3:8]))
    ksub = k.add_subparsers(dest="keys_command", metavar="STEP")

    a = ksub.add_parser("authority", help="make the authority's key and certificate (the authority, once)",
                        description=f"Make a certificate authority in DIR: {AUTHORITY_FILES}.  Run by the "
                                    f"authority the organisations chose (one of them, or a third party).  An "
                                    f"authority already in DIR is never replaced.")
    a.add_argument("--out", required=True, metavar="DIR", help="the authority's folder (made owner-only if new)")
    a.add_argument("--days", type=int, default=3650, help="validity of the authority's certificate in days "
                                                          "(default 3650)")
    a.add_argument("--name", default="sqm authority", help="the authority's name in its certificate "
                                                           "(default 'sqm authority')")
    a.set_defaults(func=run_authority)

    r = ksub.add_parser("request", help="make this organisation's own private key and its signing request",
                        description="Make this party's own private key (party_I.key, 0600, in an owner-only folder) "
                                    "and a certificate signing request (party_I.csr) naming exactly party I of the "
                                    "job (URI sqm://JOB/party/I, DNS party-I.JOB.sqm).  Run on the party's own "
                                    "host; send only the .csr to the authority.  An existing key is never "
                                    "replaced.")
    r.add_argument("--job", required=True, help="the job's name (the job file's \"name\"): lowercase letters, "
                                                "digits and inner hyphens")
    r.add_argument("--party", type=int, required=True, metavar="I", help="this party's index (0: the server)")
    r.add_argument("--out", required=True, metavar="DIR", help="this party's key folder (made 0700 if new; an "
                                                               "existing one must be owner-only)")
    r.set_defaults(func=run_request)

    s = ksub.add_parser("sign", help="check a party's signing request and sign it (the authority)",
                        description="Check FILE.csr (its signature; that it names exactly party I of job NAME and "
                                    "nothing else; no CA flag; no private key in it) and sign it with the authority "
                                    "in DIR: a certificate for client and server authentication.  The request holds "
                                    "no private key, and the authority sees none.")
    s.add_argument("csr", metavar="FILE.csr", help="the party's certificate signing request")
    s.add_argument("--authority", required=True, metavar="DIR", help="the authority's folder (sqm keys authority)")
    s.add_argument("--job", required=True, help="the job the certificate is for (the job file's \"name\")")
    s.add_argument("--party", type=int, required=True, metavar="I", help="the party the certificate is for")
    s.add_argument("--out", default=None, metavar="FILE.crt", help="where to write the certificate (default: the "
                                                                   "request's name with .crt)")
    s.add_argument("--days", type=int, default=365, help="validity in days (default 365, never beyond the "
                                                         "authority's)")
    s.set_defaults(func=run_sign)

    f = ksub.add_parser("fingerprint", help="print a certificate's public-key fingerprint (to pin in a job file)",
                        description="Print the SHA-256 fingerprint of the public key (SubjectPublicKeyInfo, DER) in "
                                    "a certificate or a signing request, as sha256:<hex>: the value of a party's "
                                    "\"fingerprint\" in the job file.")
    f.add_argument("file", metavar="FILE", help="a certificate (.crt) or a certificate signing request (.csr), PEM")
    f.set_defaults(func=run_fingerprint)

    c = ksub.add_parser("check", help="check a party's key folder before a job",
                        description="Check that DIR holds mpyc_ca.crt, party_I.crt and party_I.key; the key "
                                    "owner-only and matching the certificate; the certificate signed by the "
                                    "authority, valid, naming party I (and job NAME).  Prints OK or the problem "
                                    "(exit 3).")
    c.add_argument("--ssl-dir", required=True, metavar="DIR", help="the party's key folder (its --ssl-dir)")
    c.add_argument("--party", type=int, required=True, metavar="I", help="the party's index")
    c.add_argument("--job", default=None, help="the job's name (the job file's \"name\"), if it should be checked")
    c.set_defaults(func=run_check)
    k.set_defaults(func=lambda args: (k.print_help(), 0)[1])


def run_authority(args) -> int:
    import os

    from sqm.mpc.net.keys import make_authority

    make_authority(args.out, args.days, args.name)
    print(f"authority made in {args.out}: give {os.path.join(args.out, 'mpyc_ca.crt')} to every party; keep "
          f"{os.path.join(args.out, 'authority')}/ (its private key) on this host, offline if you can")
    return 0


def run_request(args) -> int:
    from sqm.mpc.net.keys import make_request

    key, csr = make_request(args.out, args.job, args.party)
    print(f"party {args.party}'s private key: {key} (0600; it stays on this host, never send it)")
    print(f"signing request: {csr}: send only this .csr to the authority; put the certificate it returns "
          f"(party_{args.party}.crt) and the authority's mpyc_ca.crt in {args.out}")
    return 0


def run_sign(args) -> int:
    from sqm.mpc.net.keys import sign_request

    out, pin = sign_request(args.authority, args.job, args.party, args.csr, args.out, args.days)
    print(f"signed: {out} (party {args.party} of job {args.job!r}); send it back to that party with mpyc_ca.crt")
    print(f"its key fingerprint, to pin in the job file: {pin}")
    return 0


def run_fingerprint(args) -> int:
    from sqm.mpc.net.keys import fingerprint

    print(fingerprint(args.file))
    return 0


def run_check(args) -> int:
    from sqm.mpc.net.keys import check_folder

    print(check_folder(args.ssl_dir, args.party, args.job))
    return 0
