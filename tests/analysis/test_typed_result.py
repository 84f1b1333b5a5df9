"""The analysis result is typed (`analysis.result`, and the probe's prediction `workbench.prediction.ProbePrediction`):
`analysis.json` round-trips through the types, another schema version is refused in one line, and no module of
`workbench/` reads the result or the probe's prediction by string key."""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import re
from pathlib import Path

import pytest

from analysis import result as typed
from analysis.report import analyze_data
from analysis.result import SCHEMA_VERSION, Analysis, dumps, load
from workbench import prediction as shared
from workbench.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]

RECORDS = [
    t
    for module in (typed, shared)
    for t in vars(module).values()
    if isinstance(t, type) and issubclass(t, shared.Record) and t is not shared.Record
]
"""The analysis result's types and the probe's prediction's (`ProbePrediction`, its sweep, lr* and stability)."""
TYPE_NAMES = {t.__name__ for t in RECORDS}
KEYS = {f.name for t in RECORDS for f in dataclasses.fields(t)}
"""Every key of the analysis result, the probe's prediction and their blocks (the types' fields are their JSON keys)."""
SHARED = {
    "x", "y", "lr", "mu", "ratio", "seeds", "capacity", "strategy", "metric", "target", "study", "horizon", "notes",
    "compute", "model", "params", "low", "high", "verdict", "baseline", "arm", "trial_number", "compute_to_target",
    "censored_seeds", "ci_low", "ci_high", "replay_ratio", "generators", "trainers", "source", "fit", "title", "knobs",
    "against", "n_points", "variant", "skill", "loco", "rho", "alpha", "tau0", "sigma", "scale", "pairs", "share",
    "workers_per_trainer", "lr_ref", "n_censored", "log_likelihood", "mu_used", "refused", "given", "intervals",
    "estimator", "pipeline", "target_accuracy", "predicted", "budget", "censored", "points", "run_id",
}  # fmt: skip
"""Keys that name other things too (a config's `lr` and `budget`, a spec's `target_accuracy` and `points`, a sweep
point's `x`, a run's `run_id` and `censored`, the `predicted` arm and the block of `probe/probe.json` that
`workbench.trial.probe.record` writes): read by string only on a value that is neither the analysis result nor the
probe's prediction (the taint below decides)."""
DISTINCT = KEYS - SHARED
"""Keys only the analysis result has: a string read of one is an analysis read wherever it is."""
SOURCES = {
    "analyze", "analyze_data", "analysis_json", "fit_study", "choose_model", "load",
    "probe_prediction", "probe_lr", "lr_optimum", "against_sweep",
}  # fmt: skip
"""Calls that return the analysis result (or a part of it) or the probe's prediction: what is assigned from them is
the result."""


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _called(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    return None


def _names(target: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]


def _own(scope: ast.AST):
    """The nodes of `scope`, not descending into the functions and classes defined in it (their own scopes)."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))


def _tainted(scope: ast.AST) -> set[str]:
    """The names in `scope` that hold the analysis result or a part of it: parameters annotated with one of its types,
    names assigned from a `SOURCES` call or from a tainted expression, loop variables over a tainted iterable."""
    out: set[str] = set()
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for a in [*scope.args.args, *scope.args.kwonlyargs, *scope.args.posonlyargs]:
            if a.annotation is not None and TYPE_NAMES & set(re.findall(r"\w+", ast.unparse(a.annotation))):
                out.add(a.arg)
    for _ in range(3):  # a few passes: taint flows through assignments in any order
        for node in _own(scope):
            if isinstance(node, ast.Assign):
                value, targets = node.value, node.targets
            elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                value, targets = node.value, [node.target]
            elif isinstance(node, (ast.For, ast.comprehension)):
                value, targets = node.iter, [node.target]
            else:
                continue
            if _called(value) in SOURCES or _root(value) in out:
                out.update(n for t in targets for n in _names(t))
    return out


def _key(node: ast.AST) -> str | None:
    """The string key of `x["key"]` or `x.get("key", ...)`; None for anything else."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.slice.value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return node.args[0].value
    return None


def _base(node: ast.AST) -> ast.AST:
    return node.value if isinstance(node, ast.Subscript) else node.func.value


def violations(source: str, name: str = "<source>") -> list[str]:
    """Each string-key read of the analysis result in `source`: any string key on a tainted value, or a key only the
    analysis result has on any value."""
    tree = ast.parse(source)
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]
    found = set()
    for scope in scopes:
        tainted = _tainted(scope)
        for node in _own(scope):
            key = _key(node)
            if key is not None and (key in DISTINCT or _root(_base(node)) in tainted):
                found.add((node.lineno, f"{name}:{node.lineno}: {ast.unparse(node)}"))
    return [text for _, text in sorted(found)]


def test_no_module_of_workbench_reads_the_analysis_result_by_string_key():
    found = [
        v
        for path in sorted((ROOT / "workbench").rglob("*.py"))
        for v in violations(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert found == [], "\n".join(found)


PLANTED = """
from analysis.report import analyze

def fit_and_print(name, uri):
    result, data, fit = analyze(name, uri)
    print(result.predicted.x)  # fine
    print(result["predicted"])  # 1
    for m in result.models:
        print(m["model"])  # 2
    best = result.models[0].optimum
    return best.get("refused")  # 3

def annotated(a: "Analysis", cfg: dict):
    print(cfg["lr"], cfg.get("seeds"))  # a config: fine
    return a.fit.loco, a.get("fit")  # 4

def anywhere(d):
    return d["measured_ratio_nearest_predicted_to_empirical"]  # 5: a key only the analysis has

def probed(horizon, draws, sweep, lr, p: "ProbePrediction"):
    o = probe_lr(probe_prediction(horizon, draws, 0.1, 0.2, 2.0, 8, 16), sweep, lr)
    print(o.x, p.against_sweep.claims)  # fine
    print(o["x"], p.get("refused"))  # 6, 7: the probe's prediction by string key
    return sweep[0]["lr"], sweep[0]["lr_sweep"]  # 8: a key only the probe's prediction has
"""


def test_the_rule_catches_a_planted_string_key_read():
    found = violations(PLANTED)
    assert [int(v.split(":")[1]) for v in found] == [7, 9, 11, 15, 18, 23, 23, 24], found


def test_the_analysis_json_of_a_study_round_trips_through_the_types(study):
    data = study({(1.0, 1.0): 1.0, (2.0, 1.0): 0.95, (4.0, 2.0): 0.9, (8.0, 2.0): 1.05}, seeds=2)
    result, _, _ = analyze_data(data, whatif_mu=[5.28], bootstrap=2)
    written = dumps(result)
    original = json.loads(written)
    assert original["schema_version"] == SCHEMA_VERSION and original["models"] and original["whatif"]
    back = Analysis.from_json(original)
    assert json.dumps(back.to_json(), indent=1, default=float) == written  # the same text, key order included
    assert _same(back.to_json(), original) and load(written).to_json().keys() == original.keys()
    assert back.models[0].optimum.lines() and back.lines()[0].startswith("fit: alpha")


def _same(a, b) -> bool:
    """Equal, NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize(
    "version, said",
    [(None, "schema_version none (written before the field existed)"), (99, "schema_version 99")],
)
def test_another_schema_version_is_refused_in_one_line(version, said):
    committed = json.loads((ROOT / "reports" / "quickstart" / "analysis.json").read_text())
    text = json.dumps(committed if version is None else committed | {"schema_version": version})
    with pytest.raises(ConfigError, match=re.escape(said)) as err:
        load(text)
    assert "\n" not in str(err.value) and f"reads {SCHEMA_VERSION}" in str(err.value)
    with pytest.raises(ConfigError, match="malformed"):
        Analysis.from_json({"schema_version": SCHEMA_VERSION, "study": "s"})
