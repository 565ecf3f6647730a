"""One job per session, and a connect phase that names what is wrong: a party of another job (or with another
job file) is refused at the first exchange naming it and what differs; parties that never connect are named
when the connect timeout expires; a port taken by another process is reported as such (real processes)."""
import socket

from test_tls import Parties

from sqm.errors import EXIT_REFUSED, EXIT_TIMEOUT
from sqm.mpc.net.launch import new_job_id
from sqm.mpc.net.session import differences, job_description


def test_differences_name_the_party_and_the_field():
    a, b = "3fa2" + "0" * 28, "9c1b" + "0" * 28
    mine = job_description(a, ["h:1", "h:2", "h:3"], "alpha", "EvaluateJob")
    assert differences(mine, dict(mine), "client 2") == []
    assert differences(mine, {**mine, "job_id": b, "program": "Other"}, "client 2") == [
        "client 2 runs job 9c1b0000... (this party runs 3fa20000...)"]  # another job: nothing else matters
    assert differences(mine, {**mine, "parties": ["h:1", "h:9", "h:3"]}, "client 1") == [
        "client 1 lists different party addresses (party 1: h:9; this party lists h:2)"]
    assert differences(mine, {**mine, "n_parties": 4, "parties": mine["parties"] + ["h:4"]}, "the server (party 0)") \
        == ["the server (party 0) expects 4 parties (this party: 3)"]
    assert differences(mine, {**mine, "job_name": "beta", "program": "LRParty"}, "client 1") == [
        "client 1 runs job name 'beta' (this party: 'alpha')",
        "client 1 runs a different program: LRParty (this party: EvaluateJob)"]


def test_a_party_of_another_job_is_refused_at_the_agreement_step(tmp_path):
    """Client 2 of job B, on the same ports as job A's client 2, connects to job A's parties: every party
    refuses at the first exchange, naming the party and both job ids; nothing is released."""
    job_a, job_b = new_job_id(), new_job_id()
    ps = Parties(tmp_path)
    ps.start(0, job_a)
    ps.start(1, job_a)
    ps.start(2, job_b)
    out = ps.finish()
    assert all(code == EXIT_REFUSED for code, _, _ in out.values()), out
    for j in (0, 1):
        assert f"refused before anything else: client 2 runs job {job_b[:8]}... (this party runs {job_a[:8]}...)" \
            in out[j][1], out[j]
    assert (f"the server (party 0) runs job {job_a[:8]}... (this party runs {job_b[:8]}...); client 1 runs job "
            f"{job_a[:8]}...") in out[2][1], out[2]
    assert ps.released() == []
    print("another job's party refused after", {j: round(out[j][2], 2) for j in out}, "s")
    # the same job id, but client 2's job file lists another address for client 1
    ps = Parties(tmp_path)
    other = list(ps.addrs)
    other[1] = "127.0.0.1:1"
    ps.start(0, job_a)
    ps.start(1, job_a)
    ps.start(2, job_a, addrs=other)
    out = ps.finish()
    assert all(code == EXIT_REFUSED for code, _, _ in out.values()), out
    assert f"client 2 lists different party addresses (party 1: 127.0.0.1:1; this party lists {ps.addrs[1]})" \
        in out[0][1], out[0]
    assert ps.released() == []


def test_connect_timeout_names_only_the_missing_party(tmp_path):
    job, ps = new_job_id(), Parties(tmp_path)
    host, port = ps.addrs[2].split(":")
    with socket.socket() as held:  # client 2 never starts; its port stays bound (not listening): nobody else's
        held.bind((host, int(port)))
        ps.start(0, job, connect_timeout=3)
        ps.start(1, job, connect_timeout=3)
        out = ps.finish()
    for j in (0, 1):
        code, msg, secs = out[j]
        assert code == EXIT_TIMEOUT, out
        assert (f"connect phase: not connected within 3 s: client 2 ({ps.addrs[2]}) could not be reached (last "
                f"attempt: Connection refused)") in msg, msg
        assert ps.addrs[1 - j] not in msg  # the parties that did connect are not listed
        assert secs >= 3  # not before its connect timeout; no upper bound here: a loaded machine can break one
    print("missing party named after", {j: round(out[j][2], 2) for j in out}, "s")


def test_a_squatted_port_is_reported_as_such(tmp_path):
    job, ps = new_job_id(), Parties(tmp_path)
    host, port = ps.addrs[1].split(":")
    with socket.socket() as squatter:  # another program holds client 1's port (listening, never answering)
        squatter.bind((host, int(port)))
        squatter.listen()
        for i in range(3):
            ps.start(i, job, connect_timeout=6)
        out = ps.finish()
    assert out[1][0] == EXIT_REFUSED and f"cannot listen on {ps.addrs[1]}: address in use" in out[1][1], out[1]
    assert out[0][0] == EXIT_REFUSED, out[0]
    assert (f"client 1 ({ps.addrs[1]}): the program listening on {ps.addrs[1]} accepted the connection but did not "
            f"answer as a party of this job within 3 s") in out[0][1], out[0]
    assert out[2][0] != 0, out[2]
    assert ps.released() == []
    print("squatted port reported after", {j: round(out[j][2], 2) for j in out}, "s")


def test_job_files_carry_a_fresh_job_id(tmp_path):
    import json

    import pytest

    from sqm.framework.spec import load_job, write_job

    from sqm.framework.runners import run_one
    from sqm.apps.pca import PCAJobTask

    for f in ("a.csv", "b.csv"):
        (tmp_path / f).write_text("id,x\n1,0.5\n")
    addrs = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]
    files = [tmp_path / "a.csv", tmp_path / "b.csv"]
    one = load_job(write_job(tmp_path / "one.json", addrs, files, min_intersection=1))
    two = load_job(write_job(tmp_path / "two.json", addrs, files, name="census", min_intersection=1))
    assert len(one.job_id) == 32 and one.job_id != two.job_id and two.name == "census" and one.name is None
    raw = json.loads((tmp_path / "one.json").read_text())
    for bad, msg in [({"job_id": "job-1"}, "job id 'job-1' is not 32 lowercase hex digits"),
                     ({"name": "Census 2024"}, "job name 'Census 2024' is not usable in certificates")]:
        (tmp_path / "bad.json").write_text(json.dumps({**raw, **bad}))
        with pytest.raises(ValueError, match=f"job file .*bad.json: {msg}"):
            load_job(tmp_path / "bad.json")
    del raw["job_id"]  # an old job file: one party on its own cannot be bound to a job without an id
    (tmp_path / "old.json").write_text(json.dumps(raw))
    task = PCAJobTask(n_components=1, epsilon=1.0, delta=1e-5, gamma=64.0)
    with pytest.raises(ValueError, match="old.json has no 'job_id': every party of a job needs the same fresh id"):
        run_one(load_job(tmp_path / "old.json"), 1, task)
