"""The models' skill against the null predictors, read from committed reports (analysis.json) without their MLflow
stores (docs/theory.md, "Predictors against null models").

For each report: the null predictors (constant, lr-only, nearest) and every registered model that applies, refitted
to one point per configuration (`analysis.null_models.skill_from_report`), all scored by leave-one-configuration-out
error; the table the study report shows (`analysis.sections.skill_section`), with the per-seed LOCO the report
committed beside the refit's; the probe's arm against its sweep's null where the study ran one (and against the
grid's best, re-accounted at another mu, where the report did so); and F1's exponent
read again from the report's F1 rows (`analysis.laws.exponent_reading`).

    .venv/bin/python benchmarks/predictor_skill.py reports/archive/replay_grid_demo [reports/archive/split_grid_hi ...]
        [--models thm45,extended_lr] [--json out.json]

A path is a report folder or its analysis.json. Takes a minute or more per report on a shared machine (a refit per
configuration per model).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from analysis import laws, null_models
from analysis.report import MODEL_MIN_CONFIGURATIONS
from analysis.sections import skill_section


def _load(path: str) -> dict:
    p = Path(path)
    p = p / "analysis.json" if p.is_dir() else p
    if not p.is_file():
        sys.exit(f"{path}: no analysis.json there")
    return json.loads(p.read_text())


def _f1(result: dict) -> str | None:
    f1 = next((v for v in result.get("laws") or [] if v["law"] == "F1" and v["rows"]), None)
    if f1 is None:
        return None
    n = f1["numbers"]
    mus = [r["mu"] for r in f1["rows"]]
    e = laws.exponent_reading([r["y"] for r in f1["rows"]], mus, n["grid_y"], n["slope_low"], n["slope_high"])
    return (
        f"F1 (committed verdict: {f1['verdict']}; slope {n['slope']:.2f} [{n['slope_low']:.2f}, {n['slope_high']:.2f}]):"
        f" {'separates' if e['separates'] else 'cannot separate'} 0.5 from 1; {e['words']}."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", help="report folders (or their analysis.json)")
    parser.add_argument("--models", help="comma-separated registered models (default: every one that applies)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    everything = {}
    for path in args.reports:
        result = _load(path)
        table = null_models.configuration_table_from_records(result["configurations"])
        names = (
            [] if len(table) < MODEL_MIN_CONFIGURATIONS else args.models.split(",") if args.models else None
        )  # as the report
        out = null_models.skill_from_report(result, seed=args.seed, models=names)
        probes = [
            {**v, "against_sweep": null_models.probe_record_against_on_policy(result["configurations"], v)}
            for v in result.get("probe_verified") or []
        ]
        print(
            f"# {result['study']} ({path}): {len(result['configurations'])} configuration records, mu {result['reference_mu']:.3g}\n"
        )
        print(
            "\n".join(
                skill_section({"null_models": out["null_models"], "models": out["models"], "probe_verified": probes})
            )
        )
        for m in out["models"]:
            c = m["committed_loco"] or {}
            committed = (
                f"{c['median_abs_log_error']:.3f} in the committed report (per-seed fit, {c['n']} configurations)"
                if c.get("n")
                else "not in the committed report"
            )
            print(
                f"- `{m['model']}`: LOCO median |log error| {m['loco'].get('median_abs_log_error', math.nan):.3f} refitted to the"
                f" configurations, {committed}"
            )
        for v in result.get("probe_verified") or []:
            print(
                f"- the probe's point (trial {v['trial_number']}) costs {v['ratio_to_empirical_best']:.2f}x the grid's best at the"
                f" study's mu"
                + "".join(
                    f"; {p['ratio_to_empirical_best']:.2f}x the best re-accounted at mu {mu} ((x {w['empirical']['x']:g},"
                    f" y {w['empirical']['y']:g}) there)"
                    for mu, w in (result.get("whatif") or {}).items()
                    for p in w.get("probe_verified") or []
                    if p["trial_number"] == v["trial_number"]
                )
                + " (selection estimates)"
            )
        f1 = _f1(result)
        if f1:
            print(f"\n{f1}")
        print()
        everything[str(path)] = {**out, "probe_verified": probes, "f1": f1}
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=1, default=float))


if __name__ == "__main__":
    main()
