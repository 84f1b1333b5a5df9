"""The two twins of the trainer comparison (studies/trl_quickstart*.yaml) ask the same question: they differ in
their name, description, trainer and stores only, and both validate."""

from __future__ import annotations

from pathlib import Path

import yaml

from workbench.study.spec import load_spec

STUDIES = Path(__file__).resolve().parents[2] / "studies"
OWN = ("name", "description", "storage", "tracking_uri")


def test_the_trl_and_native_quickstart_twins_differ_only_in_their_trainer():
    trl, native = (
        yaml.safe_load((STUDIES / f).read_text()) for f in ("trl_quickstart.yaml", "trl_quickstart_native.yaml")
    )
    assert trl["base"].pop("trainer") == {"kind": "trl"} and native["base"].pop("trainer") == {"kind": "workbench"}
    assert {k: v for k, v in trl.items() if k not in OWN} == {k: v for k, v in native.items() if k not in OWN}
    for f in ("trl_quickstart.yaml", "trl_quickstart_native.yaml"):
        spec = load_spec(STUDIES / f)
        assert spec.trial_config({}, 0).trainer.kind in ("trl", "workbench")
