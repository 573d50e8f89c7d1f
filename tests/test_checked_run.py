"""One validation (issue 74, item 3): a run's settings are checked once, by CheckedRun.check, which alone can make a
CheckedRun; the door makes it, and a Session handed one checks nothing again (no model needed: a stand-in
tokenizer)."""

import pickle
from types import SimpleNamespace

import pytest

from specviz.accept.sampling import SamplingSettings
from specviz.engine import checked_run
from specviz.engine.checked_run import CheckedRun
from specviz.engine.session import Session
from specviz.errors import SpecvizError
from specviz.lab.visitor_request import VisitorRequest
from specviz.methods import METHODS
from specviz.tree.budget import Budget


class Letters:
    """A tokenizer stand-in: what a Session reads of one before its first prompt."""

    def __len__(self):
        return 30

    def batch_decode(self, ids):
        return [chr(97 + i[0] % 26) for i in ids]


def test_only_the_check_makes_one_and_it_survives_a_journey():
    with pytest.raises(TypeError, match="CheckedRun.check"):
        CheckedRun("pld", (), Budget(4), SamplingSettings())
    run = CheckedRun.check("pld", {"max_ngram": "4"}, "8", SamplingSettings(0.5, 0.9, 3))
    assert run.param_values["max_ngram"] == 4 and run.budget == Budget(8)
    assert pickle.loads(pickle.dumps(run)) == run  # a carried state unpickles into a CheckedRun still


@pytest.mark.parametrize("bad", [{"method": "warp"}, {"params": {"max_ngram": 99}}, {"params": {"tau": 1}},
                                 {"budget": "0"}, {"sampling": SamplingSettings(float("nan"), 1.0, 0)}])
def test_the_check_refuses_with_a_sentence(bad):
    args = {"method": "pld", "params": {}, "budget": "auto", "sampling": SamplingSettings(), **bad}
    with pytest.raises(SpecvizError):
        CheckedRun.check(args["method"], args["params"], args["budget"], args["sampling"])


def test_the_door_checks_once_and_the_session_not_again(monkeypatch):
    calls = []
    real = CheckedRun.check.__func__
    monkeypatch.setattr(CheckedRun, "check", classmethod(lambda cls, *a, **k: calls.append(a) or real(cls, *a, **k)))
    request = VisitorRequest.of_loose({"model": "", "prompt": "Tell me about tides.", "method": "racer",
                                       "budget": 12, "params": {"min_path_prob": 0.05}})
    assert len(calls) == 1
    for method in METHODS.values():  # nothing the session does re-resolves the parameters
        monkeypatch.setattr(method, "resolve_params", classmethod(lambda cls, o: pytest.fail("checked again")))
    session = Session(SimpleNamespace(tokenizer=Letters()), request.settings.run)
    assert len(calls) == 1 and session.params["min_path_prob"] == 0.05 and session.budget == Budget(12)
    assert checked_run._SEAL is pickle.loads(pickle.dumps(checked_run._SEAL))
