"""The in-process runner (sqm.mpc.protocols.inprocess): the same party programs and interface as real processes, the
ideal functionality for evaluations, the same refusals and exit codes; deadlocks refused, never hung."""
import numpy as np
import pytest

from sqm.mpc.net import wire
from sqm.mpc.protocols.backend import FixedClient, Job
from sqm.errors import EXIT_BAD_DATA, EXIT_ERROR, EXIT_OK, EXIT_REFUSED
from sqm.mpc.protocols.inprocess import run_in_process
from sqm.mpc.net.launch import MPCError
from sqm.mpc.net.party import PartyProgram
from sqm.mpc.protocols.context import EvaluateJob
from sqm.mpc.protocols.program import SumProgram


def _gram_job(blocks, bound=50):
    prog = SumProgram.gram_program(sum(b.shape[1] for b in blocks))
    owner = [j for j, b in enumerate(blocks) for _ in range(b.shape[1])]
    return Job(program=prog, clients=[FixedClient(b, prog.n_out) for b in blocks], col_bounds=[bound] * len(owner),
               n_records=max(b.shape[0] for b in blocks), var_owner=owner)


def _programs(job, outputs_to_clients=False):
    pub = job.public()
    return [EvaluateJob(pub, None, outputs_to_clients)] + [EvaluateJob(pub, c, outputs_to_clients) for c in job.clients]


def test_ideal_evaluation_is_the_exact_gram_at_the_receivers_only():
    rng = np.random.default_rng(0)
    blocks = [rng.integers(-50, 51, (30, 2)), rng.integers(-50, 51, (30, 3)), rng.integers(-50, 51, (30, 1))]
    X = np.hstack(blocks)
    recs = run_in_process(_programs(_gram_job(blocks)))
    assert [int(v) for v in recs[0]["result"]] == [int(v) for v in (X.T @ X).reshape(-1)]
    assert all(r["result"] is None for r in recs[1:])  # only the server receives
    recs = run_in_process(_programs(_gram_job(blocks), outputs_to_clients=True))
    assert all([int(v) for v in r["result"]] == [int(v) for v in (X.T @ X).reshape(-1)] for r in recs)
    assert all(r["bytes_sent"] > 0 for r in recs)  # the agreement and checks are real frames


def test_the_real_protocol_in_process_opens_the_same_integers():
    rng = np.random.default_rng(2)
    blocks = [rng.integers(-50, 51, (25, 2)), rng.integers(-50, 51, (25, 2)), rng.integers(-50, 51, (25, 1))]
    job = _gram_job(blocks)
    ideal = run_in_process(_programs(job))
    real = run_in_process(_programs(job), ideal=False)
    assert [int(v) for v in real[0]["result"]] == [int(v) for v in ideal[0]["result"]]
    # three clients (2t + 1): they alone hold input shares and reduce the degree; the server sends no share
    assert real[0]["bytes_sent"] == ideal[0]["bytes_sent"]
    assert all(r["bytes_sent"] > i["bytes_sent"] for r, i in zip(real[1:], ideal[1:], strict=False))
    assert "degree reduction" in real[0]["phases"] and "degree reduction" not in ideal[0]["phases"]


def test_a_client_refusing_its_input_gives_the_real_exit_codes():
    rng = np.random.default_rng(1)
    blocks = [rng.integers(-50, 51, (20, 2)), 10 * rng.integers(-50, 51, (20, 2))]  # client 2 exceeds the bound
    with pytest.raises(MPCError) as e:
        run_in_process(_programs(_gram_job(blocks)))
    assert e.value.codes == {0: EXIT_REFUSED, 1: EXIT_REFUSED, 2: EXIT_BAD_DATA}
    assert e.value.exit_code == EXIT_BAD_DATA
    assert "client 2 refused: its integer data exceeds the public column bounds" in e.value.messages[0]
    assert e.value.headline == "client 2 refused: its integer data exceeds the public column bounds"


class _Chat(PartyProgram):
    """Party 0 sends a number to every client; clients echo it back (``rounds`` times); ``bad`` sends a string."""

    def __init__(self, rounds=1, bad=False, fail=False):
        self.rounds, self.bad, self.fail = rounds, bad, fail

    def describe(self):
        return "chat"

    async def run(self, ctx):
        if self.fail:
            raise ValueError("secret value 42 must not reach a peer")
        out = []
        for k in range(self.rounds):
            x = await ctx.broadcast(k, wire.value(int, "a round number"), step="round")
            got = await ctx.send_recv({0: "x" if self.bad else x} if not ctx.is_server else {},
                                      ctx.clients if ctx.is_server else [], wire.value(int, "an echo"), "echo")
            out.append(got)
        return out


def test_messages_are_typed_frames_checked_at_the_receiver():
    recs = run_in_process([_Chat(2), _Chat(2), _Chat(2)])
    assert recs[0]["result"] == [[0, 0], [1, 1]]
    with pytest.raises(MPCError) as e:
        run_in_process([_Chat(), _Chat(), _Chat(bad=True)])
    assert "malformed message from client 2 at step 'echo'" in str(e.value)
    assert e.value.codes[0] == EXIT_REFUSED


def test_a_failing_party_tells_the_others_its_exception_type_only():
    with pytest.raises(MPCError) as e:
        run_in_process([_Chat(), _Chat(fail=True), _Chat()])
    # client 2 had its whole program done before the notice: like a real party, its result is complete
    assert e.value.codes == {0: EXIT_REFUSED, 1: EXIT_ERROR, 2: EXIT_OK}
    server_line = e.value.messages[0]  # what the server was told
    assert "client 1 failed (ValueError)" in server_line and "42" not in server_line
    assert e.value.headline == "client 1: ValueError: secret value 42 must not reach a peer"  # its own operator's


class _Waiter(PartyProgram):
    """Every party waits for a message from the next one and sends nothing: a deadlock."""

    def describe(self):
        return "chat"

    async def run(self, ctx):
        return await ctx.send_recv({}, [(ctx.pid + 1) % ctx.M], wire.value(int, "n"), "wait")


def test_a_deadlock_is_refused_not_hung():
    with pytest.raises(MPCError) as e:
        run_in_process([_Waiter(), _Waiter(), _Waiter()], timeout=30)
    assert "sequences of exchanges differ" in str(e.value)
    assert "server (party 0) waits for client 1" in str(e.value)
    with pytest.raises(MPCError) as e:  # client 2 waits on a server that has finished
        run_in_process([_Chat(1), _Chat(1), _Waiter()], timeout=30)
    assert "refused before anything else" not in str(e.value)


def test_parties_running_different_programs_are_refused_before_anything_else():
    class Other(_Chat):
        def describe(self):
            return "other"

    with pytest.raises(MPCError) as e:
        run_in_process([_Chat(), Other(), _Chat()])
    assert "refused before anything else" in str(e.value)
    assert set(e.value.codes.values()) == {EXIT_REFUSED}


def test_two_clients_required_when_asked():
    with pytest.raises(ValueError):
        run_in_process([_Chat(), _Chat()], min_clients=2)
    assert run_in_process([_Chat(), _Chat()])[0]["result"] == [[0]]


def test_the_in_process_runner_does_not_import_mpyc():
    """Importing MPyC parses sys.argv (an app's own options, e.g. sqm pbm-vfl --b, would be misread): the
    in-process runner and the launcher never import it; only a party process does."""
    import subprocess
    import sys

    code = ("import sys; sys.argv = ['x', '--b', '16']; "
            "import sqm.mpc.protocols.inprocess, sqm.mpc.net.launch, sqm.mpc.protocols.backend; "
            "print('mpyc' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


def test_party_modules_import_no_planning_or_estimator_libraries():
    """A party process unpickles its program and imports only what runs it: not scikit-learn, dp-accounting or
    scipy.stats (planning and estimators live at the launcher; each cost a party ~1-2 s of CPU at start)."""
    import subprocess
    import sys

    code = ("import sys, pickle; import sqm.mpc.net.party, sqm.mechanism.release, sqm.apps.logreg.gradient, "
            "sqm.apps.pca.job, sqm.apps.logreg.party, sqm.apps.linreg.statistic, sqm.apps.hdp_vfl.party, "
            "sqm.framework.spec; "
            "print(sorted(m for m in ('sklearn', 'dp_accounting', 'scipy.stats', 'opacus') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", (out.stdout, out.stderr)
