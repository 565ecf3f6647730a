"""sqm.mechanism.report: the one privacy-report type and its JSON form; sqm.cli.tables: the one table helper."""
import json
import math

import numpy as np
import pytest

from sqm.mechanism import events as ev
from sqm.cli.tables import render_table
from sqm.mechanism.report import PrivacyReport, jsonable, to_json


def test_report_as_dict_is_strict_json_with_events():
    r = PrivacyReport(epsilon_server=0.9, delta=1e-5, epsilon_client=None, mu=123.0, l2_sensitivity=np.float64(2.0),
                      n_parties=np.int64(3), events=[ev.server_event(4.0, 2.0, 123.0, q=0.1, rounds=5)])
    d = r.as_dict()
    assert d["method"] == "SQM" and d["n_parties"] == 3 and type(d["n_parties"]) is int
    back = json.loads(json.dumps(d, allow_nan=False))
    assert ev.events_from_json(back["events"]) == list(r.events)
    inf = PrivacyReport(method="non-private", epsilon_server=math.inf, delta=0.0)
    assert json.loads(to_json(inf))["epsilon_server"] == "inf"
    with pytest.raises(TypeError):
        PrivacyReport("SQM", 1.0, 1e-5)  # keyword-only
    with pytest.raises(TypeError, match="JSON"):
        jsonable(object())


def test_render_table():
    rows = [{"method": "SQM (plain)", "utility": 0.987654, "eps": math.inf, "bytes": 12345},
            {"method": "non-private", "utility": 1.0}]
    out = render_table(rows, ["utility", ("eps", "eps server", ".3f"), ("bytes", "bytes", ",d")]).splitlines()
    assert out[0].split() == ["method", "utility", "eps", "server", "bytes"]
    assert out[2].split() == ["SQM", "(plain)", "0.9877", "inf", "12,345"]
    assert out[3].split() == ["non-private", "1", "-", "-"]
    assert len({len(line) for line in out[:3]}) == 1  # aligned
    assert render_table(rows).splitlines()[0].split() == ["method", "utility", "eps", "bytes"]


@pytest.mark.parametrize("q, rounds", [(1.0, 1), (0.1, 1), (1.0, 7), (0.05, 30)])
def test_deferred_events_write_the_json_of_the_built_events(q, rounds):
    """A report's events written without building them (no dp-accounting) are the dicts event_to_json writes
    of the built events."""
    import functools

    from sqm.mechanism.events import event_to_json
    from sqm.mechanism.release import _server_events, _server_events_json
    from sqm.mechanism.report import DeferredEvents

    args = (3.5, 12547.0, 1234.25, q, rounds)
    lazy = DeferredEvents(functools.partial(_server_events, *args), functools.partial(_server_events_json, *args))
    unbuilt = lazy.to_json()
    assert unbuilt == [event_to_json(e) for e in _server_events(*args)]
    assert len(lazy) == 1 and lazy.to_json() == unbuilt  # once built, written from the events themselves
