"""The declared task contract (issue 26, part 2; sqm.framework.jobtask): every job task subclasses JobTask, a task that
leaves out a required method cannot be made, and the framework calls hooks instead of probing attributes."""
from __future__ import annotations

import ast

import pytest

import sqm.framework.spec
from sqm.framework.jobtask import JobTask


def test_every_task_subclasses_the_contract():
    from sqm.apps.linreg.job import LinRegJobTask
    from sqm.apps.logreg.job import LRJobTask
    from sqm.apps.pca.job import PCAJobTask
    from bench.psi import AlignOnly

    for cls in (PCAJobTask, LRJobTask, LinRegJobTask, AlignOnly):
        assert issubclass(cls, JobTask), cls
    assert PCAJobTask(1, 1.0).takes_bounds and LRJobTask(1.0).takes_bounds


def test_a_task_without_a_required_method_cannot_be_made():
    class NoRelease(JobTask):
        def public(self):
            return ("x",)

        async def run(self, ctx, table, meta):
            return {}

    with pytest.raises(TypeError, match="release"):
        NoRelease()


def test_defaults_refuse_what_a_task_does_not_support():
    class Plain(JobTask):
        def public(self):
            return ("plain",)

        async def run(self, ctx, table, meta):
            return {}

        def release(self, meta):
            raise NotImplementedError

    t = Plain()
    assert not t.takes_bounds and t.seed is None and not t.streams
    with pytest.raises(NotImplementedError, match="takes no norm shares"):
        t.with_party_bounds([0.5, 0.5])


def test_the_framework_probes_no_task_attribute():
    """No hasattr/getattr on a task anywhere in the job framework (the hooks have defaults instead)."""
    import pathlib

    files = sorted(pathlib.Path(sqm.framework.spec.__file__).parent.glob("*.py"))
    assert {"party.py", "runners.py", "spec.py", "ledger_guard.py"} <= {f.name for f in files}
    probes = []
    for node in (n for f in files for n in ast.walk(ast.parse(f.read_text()))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr"):
            target = ast.unparse(node.args[0])
            if target in ("task", "self.task") or target.endswith(".task"):
                probes.append(f"line {node.lineno}: {ast.unparse(node)}")
    assert not probes, probes
