"""A failed job's message, for the person who ran it (sqm.mpc.net.failures): the first line names who failed and
why in under 160 characters, each cause is said once, a party the launcher stopped says so, and a port in use is
refused before any party starts."""
import asyncio
import socket
import time

import pytest

from sqm.cli.command import main
from sqm.errors import EXIT_BAD_DATA, EXIT_LOST, EXIT_REFUSED, EXIT_TIMEOUT
from sqm.mpc.net import failures, launch
from sqm.mpc.net.failures import Outcome
from sqm.mpc.net.launch import MPCError, free_ports, run_parties
from sqm.mpc.net.party import InputRefused, PartyProgram
from sqm.mpc.protocols.inprocess import run_in_process

FIRST_LINE_MAX = 160  # what the sqm command prints first, "sqm: " included

LONG = "x" * 900  # a cause as long as the 400-1,100 characters of one line that the message used to be


def _first_printed(e: MPCError) -> str:
    return f"sqm: {e.headline}"


# ----- every kind of failure, as parties' last words: the first line's bound and each cause once --------------
P = "sqm.mpc.net.party"
CASES = {
    "bad data": ({0: Outcome(3, [f"{P} server: refused before any share was sent: client 2 refused: its file has "
                                 f"missing values"]),
                  1: Outcome(3, [f"{P} client 1: refused before any share was sent: client 2 refused: its file has "
                                 f"missing values"]),
                  2: Outcome(6, ["client 2: party file /data/bank.csv has 1 missing value(s) in column 'age'",
                                 f"{P} client 2: refused its own input: its file has missing values (refused before "
                                 f"any share was sent) (see the detail above); job aborted, nothing released"])},
                 "client 2 refused: its file has missing values"),
    "port squatted at start": ({0: Outcome(3, [f"{P} server: client 1 gave up the connect phase: client 2 "
                                               f"(127.0.0.1:5003): the program listening on 127.0.0.1:5003 accepted "
                                               f"the connection but did not complete a TLS handshake within 15 s"]),
                                1: Outcome(3, [f"{P} client 1: client 2 (127.0.0.1:5003): the program listening on "
                                               f"127.0.0.1:5003 accepted the connection but did not complete a TLS "
                                               f"handshake within 15 s (a party answers at once): another program?"]),
                                2: Outcome(3, [f"{P} client 2: cannot listen on 127.0.0.1:5003: address in use "
                                               f"(another process holds this port)"])},
                               "client 2: port 5003 on 127.0.0.1 is in use"),
    "silent party": ({0: Outcome(5, [f"{P} server: timeout: no message from client 2 for 4 s (stopped or "
                                     f"partitioned?); job aborted, nothing released"]),
                      1: Outcome(5, [f"{P} client 1: timeout: The server (party 0) aborted the job: no message from "
                                     f"client 2 for 4 s (stopped or partitioned?); nothing released"]),
                      2: Outcome(-9, ["about to run job 1234..."], stopped=True)},
                     "server: timed out: no message from client 2 for 4 s (stopped or partitioned?)"),
    "killed party": ({0: Outcome(4, [f"{P} server: lost party 2 (client 2); job aborted, nothing released"]),
                      1: Outcome(4, [f"{P} client 1: lost party 2 (client 2); job aborted, nothing released"]),
                      2: Outcome(-9, ["about to run job 1234..."])},
                     "client 2: killed by signal 9"),
    "internal error": ({0: Outcome(3, [f"{P} server: Client 1 aborted the job: client 1 failed (ValueError)"]),
                        1: Outcome(1, [f"{P} client 1: ValueError: {LONG}"])},
                       "client 1: ValueError: " + "x" * (failures.HEADLINE_MAX - len("client 1: ValueError: ") - 3)
                       + "..."),
    "refused everywhere alike": ({i: Outcome(3, [f"{P} {failures.who(i)}: refused before any share was sent: the "
                                                 f"clients' record sets have 39 records in common, fewer than 40 "
                                                 f"{LONG}"]) for i in range(3)}, None),
    "a refusal told differently": ({0: Outcome(3, [f"{P} server: refused before any share was sent: client 1 refused: "
                                                   f"the model (digest ab12) is not a release it recorded"]),
                                    1: Outcome(3, [f"{P} client 1: the model (digest ab12) is not a completed "
                                                   f"release in its ledger /x/o1.sqlite; refused before any share was "
                                                   f"sent"]),
                                    2: Outcome(3, [f"{P} client 2: Client 1 aborted the job: client 1 refused: the "
                                                   f"model (digest ab12) is not a release it recorded"])},
                                   "client 1 refused: the model (digest ab12) is not a completed release in its ledger "
                                   "/x/o1.sqlite"),
    "the launcher's deadline": ({0: Outcome(-9, [], stopped=True), 1: Outcome(-9, [], stopped=True)},
                                "the job did not finish in time: the launcher stopped every party still running"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_failure_has_a_short_first_line_naming_party_and_cause(case):
    outcomes, expected = CASES[case]
    e = MPCError.of(outcomes)
    first = _first_printed(e)
    assert len(first) < FIRST_LINE_MAX and "\n" not in e.headline, first
    if expected is not None:
        assert e.headline == expected
    assert str(e).splitlines()[0] == e.headline and str(e).endswith("no result released")
    parties = [d for d in e.details if d.startswith(("server (party", "client "))]
    assert len(parties) == len(outcomes)  # one line per party
    texts = [d.split(": ", 1)[1] for d in parties]
    causes = [t for t in texts if t not in ("the same cause",) and "'s notice" not in t and "stopped by" not in t]
    assert len(causes) == len(set(causes))  # each distinct cause once
    if case == "a refusal told differently":  # what the others were told, once: it differs from the party's words
        assert texts[1:] == ["on client 1's notice: client 1 refused: the model (digest ab12) is not a release it "
                             "recorded", "on client 1's notice"], texts
    if case == "refused everywhere alike":
        assert texts.count("the same cause") == 2 and e.headline.startswith("server: refused before any share")


def test_an_echoed_cause_is_not_repeated_and_a_stopped_party_says_so():
    e = MPCError.of(CASES["bad data"][0])
    assert e.details[:2] == ["client 2 (party 2) exited 6: refused its own input: its file has missing values "
                             "(refused before any share was sent)",
                             "  client 2: party file /data/bank.csv has 1 missing value(s) in column 'age'"]
    assert e.details[2:] == ["server (party 0) exited 3 (refused): on client 2's notice",
                             "client 1 (party 1) exited 3 (refused): on client 2's notice", "no result released"]
    assert e.exit_code == EXIT_BAD_DATA and str(e).count("its file has missing values") == 2  # headline, its line
    e = MPCError.of(CASES["silent party"][0])
    assert "client 2 (party 2): stopped by the launcher after server failed" in e.details
    assert "client 1 (party 1) exited 5 (timed out): on server's notice" in e.details
    assert e.exit_code == EXIT_TIMEOUT and "-9" not in str(e) and "no message)" not in str(e)
    assert MPCError.of(CASES["killed party"][0]).exit_code == EXIT_LOST


# ----- real party processes ----------------------------------------------------------------------------------
class Same(PartyProgram):
    def describe(self):
        return "one job"  # every party's program agrees


class Refuses(Same):
    """Refuses its own input at once, with a detail for its operator."""

    async def run(self, ctx):
        await asyncio.sleep(1.0)  # the others are inside their (blocking) programs by then
        raise InputRefused("its file has missing values", "bank.csv row 7 column 'age': NaN")


class Busy(Same):
    """Blocks its event loop (a long computation): it cannot read the abort notice."""

    async def run(self, ctx):
        time.sleep(60)
        await asyncio.sleep(0)


def test_parties_stopped_by_the_launcher_are_reported_as_stopped(monkeypatch):
    monkeypatch.setattr(launch, "STOP_GRACE_S", 0.5)
    with pytest.raises(MPCError) as err:
        run_parties([Busy(), Busy(), Refuses()], timeout=60)
    e = err.value
    assert e.headline == "client 2 refused: its file has missing values (bank.csv row 7 column 'age': NaN)"
    assert len(_first_printed(e)) < FIRST_LINE_MAX
    assert e.codes[2] == EXIT_BAD_DATA and e.codes[0] < 0 and e.codes[1] < 0 and e.exit_code == EXIT_BAD_DATA
    assert e.details[0].startswith("client 2 (party 2) exited 6: refused its own input: its file has missing values")
    for i in (0, 1):
        assert f"{failures.who(i)} (party {i}): stopped by the launcher after client 2 failed" in e.details
    assert "(no message)" not in str(e) and "exited -9" not in str(e)


def test_a_port_in_use_is_refused_before_any_party_starts(monkeypatch):
    started = []
    monkeypatch.setattr(launch.Launch, "start", lambda self, *a, **k: started.append(a))
    ports = free_ports(3)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", ports[2]))
        squatter.listen()
        with pytest.raises(MPCError) as err:
            run_parties([Busy(), Busy(), Busy()], addresses=[f"127.0.0.1:{p}" for p in ports])
    e = err.value
    assert e.headline == f"client 2: port {ports[2]} on 127.0.0.1 is in use" and not started
    assert e.codes == {2: EXIT_REFUSED} and e.exit_code == EXIT_REFUSED


def test_sqm_prints_the_port_in_use_first(tmp_path, capsys):
    from sqm.framework.spec import write_job

    for j in (1, 2):
        (tmp_path / f"c{j}.csv").write_text("id,a\n" + "".join(f"{i},{i % 3}\n" for i in range(30)))
    ports = free_ports(3)
    job = write_job(str(tmp_path / "job.json"), [f"127.0.0.1:{p}" for p in ports],
                    [str(tmp_path / "c1.csv"), str(tmp_path / "c2.csv")])
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", ports[1]))
        squatter.listen()
        code = main(["pca", "--job", job, "--components", "1", "--quiet"])
    err = capsys.readouterr().err
    assert code == EXIT_REFUSED
    assert err.splitlines()[0] == f"sqm: client 1: port {ports[1]} on 127.0.0.1 is in use", err
    assert err.splitlines()[-1] == "  exit 3: refused"


def test_in_process_failures_have_the_same_short_first_line():
    class Refuse(Same):
        async def run(self, ctx):
            raise InputRefused("its file has missing values", "row 7 " + LONG)

    class Wait(Same):
        async def run(self, ctx):
            return await ctx.send_recv({}, [2], lambda x: x, "client 2's message")

    with pytest.raises(MPCError) as err:
        run_in_process([Wait(), Wait(), Refuse()])
    e = err.value
    assert e.headline.startswith("client 2 refused: its file has missing values (row 7 xxx")
    assert len(_first_printed(e)) < FIRST_LINE_MAX and e.headline.endswith("...")
    assert e.details[1:3] == ["server (party 0) exited 3 (refused): on client 2's notice",
                              "client 1 (party 1) exited 3 (refused): on client 2's notice"]


@pytest.mark.parametrize("text", [
    "sqm: error: job file job.json: client 2 (the label party) has no label column 'y' in its file; its columns are "
    "['bmi', 'glucose', 'systolic', 'outcome']: name the label's column with --label-column (refused before any "
    "party started)",
    "sqm: error: a linreg job needs its label's public range, declared once: \"label_range\": [lo, hi] in the task "
    "block, or --label-range LO HI (labels beyond --label-bound 1 would be clipped)",
    "sqm: " + "word " * 60 + "end",
    "sqm: short enough\n  second line",
])
def test_a_long_message_keeps_a_short_first_line_and_loses_nothing(text):
    """The face's errors (usage errors, a party's own refusal): the first line under 160 characters, broken at a
    clause boundary, and the lines joined by a space give the message back word for word."""
    from sqm.cli.command import short_first_line

    out = short_first_line(text)
    assert len(out.splitlines()[0]) < 160
    assert out.replace("\n  ", " ") == text.replace("\n  ", " ")
    if len(text.partition("\n")[0]) < 160:
        assert out == text
