"""The analysis result as frozen types: what `analysis.report.analyze` returns and `analysis.json` holds.

`Analysis` is the whole result: the study read (its target, curve, estimator, run counts), the per-run noise blocks,
the fitted optimum (`FittedOptimum`: the fit's `FitSummary`, its `Predicted` point, the empirical best, the compared
models as `ModelSummary` each with its `Optimum`, a point or the reason it refuses one), every measured
`Configuration`, the re-runs on fresh seeds (`Confirmation`), the what-if re-accountings and the fit's `Prediction`.
A paired ratio with how its pairs were counted is a `Comparison`. `analysis.recommend` builds a `Recommendation`.

Each type gives `to_json()` (a plain JSON-able dict, the shape `analysis.json` has always had, with `schema_version`
added), `from_json()` (its inverse: `Analysis.from_json(json.load(f)) .to_json()` gives the file back) and `lines()`
(what the command line prints of it), as `workbench.prediction.Record`, the frozen JSON block they share with the
probe's prediction (`workbench.prediction.ProbePrediction`). Blocks the analysis's other modules build and only its
report reads (the noise by estimator and by curve, skill or sharpness, the tuned learning rate, the laws, the
pipeline) stay plain JSON inside the types. Code outside `analysis/` reads the result by attribute only
(tests/analysis/test_typed_result.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from workbench import censoring, stats
from workbench.config import ConfigError
from workbench.prediction import Json, Prediction, Record
from workbench.prediction import omitted as _omitted

SCHEMA_VERSION = 1
"""`analysis.json`'s `schema_version`: bumped whenever its shape changes; a file of another version is refused in one
line (`load`), never half read. Files written before the field existed carry none and are refused too."""


def _fmt(v: float | None, digits: int = 3) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.{digits}g}"


@dataclass(frozen=True, kw_only=True)
class Comparison(Record):
    """A paired ratio (arm over the other, by seed) with its 95% interval, its verdict and how its pairs were counted
    (`workbench.censoring`): informative pairs, of them the ones where one run never reached the target (a bound),
    and the pairs where neither did (left out). The counts are None for a comparison written before they were."""

    ratio: float
    low: float
    high: float
    seeds: int | None = _omitted()
    verdict: str | None = _omitted()
    informative_pairs: int | None = _omitted()
    one_censored_pairs: int | None = _omitted()
    both_censored_pairs: int | None = _omitted()

    @property
    def resolved_below_one(self) -> bool:
        """Its whole interval lies below 1: the arm takes resolvably less."""
        return math.isfinite(self.high) and self.high < 1

    def interval(self) -> stats.Interval:
        """As `workbench.censoring` reads a comparison (a `censoring.Comparison` where the pairs were counted)."""
        return censoring.from_row(self.to_json(), "ratio", "low", "high")

    def counts_text(self) -> str:
        """` (4 informative pairs, ...)`, empty where the pairs were not counted."""
        return censoring.counts_text(self.to_json())

    def lines(self) -> list[str]:
        if not math.isfinite(self.ratio):
            return ["-"]
        return [f"{self.ratio:.2f} [{_fmt(self.low)}, {_fmt(self.high)}]{self.counts_text()}: {self.verdict or '-'}"]


@dataclass(frozen=True, kw_only=True)
class Configuration(Record):
    """One measured configuration of the study (a trial, over its seeds): its knobs, its compute to target with the
    95% interval, its ratio to on-policy paired by seed with the verdict and pair counts, its best reading."""

    trial_number: int
    x: float
    y: float
    capacity: int
    ratio: float
    baseline: bool
    strategy: str = "uniform"
    variant: str | None = _omitted()
    compute_to_target: float
    ci_low: float
    ci_high: float
    ratio_to_baseline: float
    ratio_ci_low: float
    ratio_ci_high: float
    verdict: str
    best_accuracy: float
    best_reading: float
    seeds: int
    censored_seeds: int
    arm: str = "sampler"
    informative_pairs: int | None = _omitted()
    one_censored_pairs: int | None = _omitted()
    both_censored_pairs: int | None = _omitted()
    lr: float | None = _omitted()

    @property
    def comparison(self) -> Comparison:
        """Its ratio to on-policy's compute on the same seeds."""
        return Comparison(
            ratio=self.ratio_to_baseline,
            low=self.ratio_ci_low,
            high=self.ratio_ci_high,
            seeds=self.seeds,
            verdict=self.verdict,
            informative_pairs=self.informative_pairs,
            one_censored_pairs=self.one_censored_pairs,
            both_censored_pairs=self.both_censored_pairs,
        )

    @property
    def compared(self) -> bool:
        """It has a paired ratio to on-policy."""
        return math.isfinite(self.ratio_to_baseline)

    def compute_interval(self) -> stats.Interval:
        return censoring.from_row(self.to_json(), "compute_to_target", "ci_low", "ci_high")

    def strategy_shown(self) -> dict[str, str]:
        """Its strategy as the labels show it (`analysis.data.strategy_shown`)."""
        from analysis.data import strategy_shown

        return strategy_shown({"strategy": self.strategy, "variant": self.variant})

    def lines(self) -> list[str]:
        ratio = self.comparison.lines()[0] if self.compared else "-"
        return [
            f"trial {self.trial_number} ({self.arm}): x {_fmt(self.x)}, y {_fmt(self.y)}, compute to target"
            f" {_fmt(self.compute_to_target)} [{_fmt(self.ci_low)}, {_fmt(self.ci_high)}]; ratio to on-policy {ratio}"
        ]


@dataclass(frozen=True, kw_only=True)
class Estimate(Configuration):
    """A configuration beside what the fitted model predicts for it (the empirical optimum, the baseline)."""

    predicted_compute_to_target: float


@dataclass(frozen=True, kw_only=True)
class Verified(Configuration):
    """A fitted optimum run as trials of the study (`study verify`): what was predicted then and what is now."""

    predicted_when_run: float
    predicted_now: float


@dataclass(frozen=True, kw_only=True)
class ProbeVerified(Configuration):
    """The probe's optimum run as trials (`study verify --probe`), against the empirical best and its lr sweep."""

    predicted_when_run: float
    ratio_to_empirical_best: float
    against_sweep: Json = None


@dataclass(frozen=True, kw_only=True)
class Replicate(Configuration):
    """A configuration with the seeds it ran (a selection run, or its re-run on fresh seeds)."""

    seed_list: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class Confirmation(Record):
    """A configuration re-run on fresh seeds (`study confirm`): its selection estimate beside the replication."""

    selection: Replicate
    replicated: Replicate

    def lines(self) -> list[str]:
        return [f"selection: {self.selection.lines()[0]}", f"replicated: {self.replicated.lines()[0]}"]


@dataclass(frozen=True, kw_only=True)
class Point(Record):
    """A point of the knobs with the compute a model predicts there (and the learning rate, for a model using it)."""

    x: float
    y: float
    compute: float
    lr: float | None = _omitted()

    def lines(self) -> list[str]:
        return [f"x {self.x:.3g}, y {self.y:.3g}" + (f", lr {self.lr:.3g}" if self.lr is not None else "")]


@dataclass(frozen=True, kw_only=True)
class Optimum(Record):
    """A model's optimum (`analysis.models.optimum`): a point, or `refused` and why (its minimum on a flat ridge,
    whose simplest point is `ridge_point`, or at the searched range's edge). The argmin is kept either way."""

    x: float
    y: float
    compute: float
    near_x: tuple[float, float] | None = _omitted()
    near_y: tuple[float, float] | None = _omitted()
    lr: float | None = _omitted()
    near_lr: tuple[float, float] | None = _omitted()
    refused: str | None = _omitted()
    ridge_point: Point | None = _omitted()

    @property
    def point(self) -> Point | None:
        """The optimum as a point to run; None where it is refused."""
        return None if self.refused else Point(x=self.x, y=self.y, compute=self.compute, lr=self.lr)

    def lines(self) -> list[str]:
        if self.refused:
            return [f"refused ({self.refused})"]
        return Point(x=self.x, y=self.y, compute=self.compute, lr=self.lr).lines()


@dataclass(frozen=True, kw_only=True)
class Skill(Record):
    """A model against the null predictors out of sample (`analysis.null_models.skill`)."""

    against: Json = None
    selected: bool
    not_beaten: tuple[str, ...] = ()
    words: str

    def lines(self) -> list[str]:
        return [self.words]


@dataclass(frozen=True, kw_only=True)
class ModelSummary(Record):
    """A compared model fitted to uniform replay's runs (`analysis.models.ModelFit.summary`): its parameters, their
    intervals, its fit, its leave-one-configuration-out error, its `Optimum` and, where scored, its `Skill`."""

    model: str
    title: str
    params: dict[str, float]
    intervals: Json
    unidentified: tuple[str, ...]
    n_points: int
    n_censored: int
    log_likelihood: float
    aic: float
    loco: Json
    r2_log: float
    median_abs_log_error: float
    mu: float
    lr_ref: float
    optimum: Optimum
    skill: Skill | None = _omitted()

    @property
    def loco_error(self) -> float:
        """Its leave-one-configuration-out median |log error| (NaN where none was scored)."""
        return (self.loco or {}).get("median_abs_log_error", math.nan)

    @property
    def selected(self) -> bool:
        """It beats every null predictor out of sample."""
        return self.skill is not None and self.skill.selected

    def fit(self):
        """The fit again, able to predict (`analysis.models.ModelFit.from_summary`)."""
        from analysis.models import ModelFit

        return ModelFit.from_summary(self.to_json())

    def lines(self) -> list[str]:
        loco = self.loco or {}
        held = f"{loco['median_abs_log_error']:.3g} over {loco['n']}" if loco.get("n") else "-"
        return [
            f"model {self.model}: AIC {self.aic:.4g}, LOCO median |log error| {held}, unidentified "
            f"{', '.join(self.unidentified) or 'none'}; optimum {self.optimum.lines()[0]}"
        ]


@dataclass(frozen=True, kw_only=True)
class LossModels(Record):
    """A study of several losses: the compared models and the null predictors fitted to one loss's uniform runs
    (with the on-policy baseline's, their shared anchor at y 1, x 1)."""

    loss_name: str
    """Its `objective.name`."""
    n_runs: int
    n_configurations: int
    models: tuple[ModelSummary, ...] = ()
    null_models: Json = _omitted()

    @property
    def selected(self) -> tuple[ModelSummary, ...]:
        """The models that beat every null predictor out of sample."""
        return tuple(m for m in self.models if m.selected)

    def lines(self) -> list[str]:
        best = self.models[0] if self.models else None
        read = (
            "too few configurations to compare models"
            if best is None
            else f"best by LOCO {best.model} ({best.loco_error:.3g}); beats every null: "
            + (", ".join(m.model for m in self.selected) or "none")
        )
        return [f"{self.loss_name}: {self.n_runs} runs, {self.n_configurations} configurations; {read}"]


@dataclass(frozen=True, kw_only=True)
class SignalLink(Record):
    """How one staleness diagnostic ranks with the saving across replay configurations (`analysis.stale_signals`):
    Spearman's rho between the configuration's mean diagnostic and the log of its paired ratio against on-policy at
    its lr (rho < 0: the higher the diagnostic, the larger the saving), with its 95% interval over configurations."""

    diagnostic: str
    """The runs.csv column (`ess_mean`, `grad_cosine_mean`, `age_mean`)."""
    diagnostic_words: str
    scope: str
    """`every loss`, or `loss <name>` in a study of several losses."""
    n_configurations: int
    rho: float
    low: float
    high: float

    @property
    def resolved(self) -> bool:
        return math.isfinite(self.low) and (self.low > 0 or self.high < 0)

    def words(self) -> str:
        if not self.resolved:
            return "unresolved"
        more = "the higher it is, the smaller the saving" if self.rho > 0 else "the higher it is, the larger the saving"
        return f"resolved: {more}"

    def lines(self) -> list[str]:
        return [
            f"{self.diagnostic_words} ({self.scope}): rho {self.rho:+.2f} [{self.low:+.2f}, {self.high:+.2f}] over "
            f"{self.n_configurations} configurations, {self.words()}"
        ]


@dataclass(frozen=True, kw_only=True)
class FitSummary(Record):
    """The report's model (Theorem 4.5's, distinct draws) fitted to uniform replay's runs (`analysis.fit.Fit`)."""

    alpha: float
    tau0: float
    rho: float
    scale: float
    sigma: float
    mu: float
    with_replacement: bool
    n_points: int
    n_censored: int
    log_likelihood: float
    intervals: Json
    loco: Json
    r2_log: float
    median_abs_log_error: float

    def lines(self) -> list[str]:
        return [
            f"fit: alpha {self.alpha:.3g}, tau0 {self.tau0:.3g}, rho {self.rho:.3g}; R² (log) {self.r2_log:.3g};"
            f" LOCO {self.loco}"
        ]


@dataclass(frozen=True, kw_only=True)
class Predicted(Record):
    """The fitted model's optimum: the point, its compute, the knobs that run it, the measured configuration nearest."""

    x: float
    y: float
    compute_to_target: float
    knobs: Json
    nearest_measured: Configuration
    on_policy_optimal: bool

    def lines(self) -> list[str]:
        return [f"predicted optimum: x {self.x:.3g}, y {self.y:.3g} (capacity {self.knobs['capacity']} at B)"]


@dataclass(frozen=True, kw_only=True)
class Savings(Record):
    """The empirical optimum's saving against on-policy, paired by seed with its 95% interval, and the fit's."""

    measured: float
    measured_ci: tuple[float, float]
    verdict: str
    predicted: float

    def lines(self) -> list[str]:
        lo, hi = self.measured_ci
        return [
            f"savings against on-policy: measured {self.measured:.1%} (95% CI {lo:.1%} to {hi:.1%}; {self.verdict}),"
            f" predicted {self.predicted:.1%}"
        ]


@dataclass(frozen=True, kw_only=True)
class FittedOptimum(Record):
    """The fitted against the empirical optimum at one mu (the study's, or a what-if re-accounting): the fit, its
    predicted point, the empirical best, the baseline and the savings, the Pareto front, the trials `study verify`
    ran and the compared models."""

    mu: float
    fit: FitSummary
    fit_configurations: int
    other_strategies: tuple[str, ...]
    predicted: Predicted
    empirical: Estimate
    measured_ratio_nearest_predicted_to_empirical: float
    pareto_front: tuple[Configuration, ...]
    verified: tuple[Verified, ...]
    probe_verified: tuple[ProbeVerified, ...]
    models: tuple[ModelSummary, ...] = ()
    baseline: Estimate | None = _omitted()
    savings_vs_on_policy: Savings | None = _omitted()
    null_models: Json = _omitted()

    def lines(self) -> list[str]:
        e = self.empirical
        return [
            *self.fit.lines(),
            f"{self.predicted.lines()[0]}; empirical: trial {e.trial_number} x {e.x:.3g}, y {e.y:.3g}, compute to"
            f" target {e.compute_to_target:.4g}",
            *(line for m in self.models for line in m.lines()),  # best first (analysis.models.compare)
        ]


_HEAD = ("schema_version", "study", "target_accuracy", "metric", "estimator", "resolution", "noise_by_estimator")
_NOISE = ("by_reading", "by_checkpoint", "skill_or_sharpness", "skill_or_sharpness_tuned", "reference_mu", "n_runs")
_COUNTS = ("n_configurations", "n_censored_runs", "variance_form", "noise_model")
_TAIL = (
    "configurations",
    "confirmations",
    "tuned_lr",
    "whatif",
    "laws",
    "pipeline",
    "pipeline_mapped",
    "prediction",
    "by_loss",
    "stale_signals",
)


@dataclass(frozen=True, kw_only=True)
class Analysis(FittedOptimum):
    """A study's analysis (`analysis.report.analyze`), as `analysis.json` holds it."""

    schema_version: int = SCHEMA_VERSION
    study: str
    target_accuracy: float
    metric: str
    estimator: str
    resolution: Json = None
    noise_by_estimator: Json = None
    by_reading: Json = None
    by_checkpoint: Json = None
    skill_or_sharpness: Json = None
    skill_or_sharpness_tuned: Json = None
    reference_mu: float
    n_runs: int
    n_configurations: int
    n_censored_runs: int
    variance_form: str
    noise_model: str
    configurations: tuple[Configuration, ...]
    confirmations: tuple[Confirmation, ...] = ()
    tuned_lr: Json = None
    whatif: dict[str, FittedOptimum] = field(default_factory=dict)
    laws: Json = ()
    pipeline: Json = ()
    pipeline_mapped: Json = _omitted()
    prediction: Prediction | None = None
    by_loss: tuple[LossModels, ...] | None = _omitted()
    """A study of several losses (`objective.name`): the models and nulls fitted to each loss's runs."""
    stale_signals: tuple[SignalLink, ...] | None = _omitted()
    """Whether the runs' staleness diagnostics (ESS, gradient cosine, age) rank with replay's saving."""

    JSON_ORDER: ClassVar[tuple[str, ...]] = (
        *_HEAD,
        *_NOISE,
        *_COUNTS,
        *(f.name for f in fields(FittedOptimum)),
        *_TAIL,
    )

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Analysis:
        """The analysis `to_json` wrote; another `schema_version`, or a file missing a key: `ConfigError`, one line."""
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version != SCHEMA_VERSION:
            found = "none (written before the field existed)" if version is None else repr(version)
            raise ConfigError(
                f"analysis.json: schema_version {found}, this workbench reads {SCHEMA_VERSION}: run"
                " `workbench analyze` again to write it"
            )
        try:
            return super().from_json(data)
        except (KeyError, TypeError, AttributeError) as err:
            raise ConfigError(f"analysis.json: malformed for schema_version {SCHEMA_VERSION} ({err})") from None

    @property
    def selection(self) -> tuple[Configuration, ...]:
        """The configurations selection ranks (not the re-runs on fresh seeds)."""
        return tuple(c for c in self.configurations if c.arm != "confirm")

    @property
    def baseline_configuration(self) -> Configuration | None:
        return next((c for c in self.configurations if c.baseline), None)

    @property
    def lr_varies(self) -> bool:
        return len({c.lr for c in self.configurations}) > 1

    def configuration(self, trial_number: int) -> Configuration:
        return next(c for c in self.configurations if c.trial_number == trial_number)

    def lines(self) -> list[str]:
        """What `workbench analyze` prints: the fit, the predicted and the empirical optimum, every compared model with
        its optimum or refusal, the paper's laws, the staleness diagnostics against the saving."""
        return [
            *super().lines(),
            *(law["line"] for law in self.laws or ()),
            *(line for link in self.stale_signals or () for line in link.lines()),
        ]


@dataclass(frozen=True, kw_only=True)
class Split(Record):
    """A split of generators to trainers and the replay ratio it gives at the recommendation's mu."""

    generators: int
    trainers: int
    replay_ratio: float

    def lines(self) -> list[str]:
        return [f"your split W {self.generators} : T {self.trainers} gives y about {self.replay_ratio:.3g} at this mu"]


@dataclass(frozen=True, kw_only=True)
class Recommended(Record):
    """The settings to run: on-policy (no buffer) or a replay strategy's buffer, its learning rate and W:T split."""

    strategy: str
    capacity: int | None = None
    horizon: Json = None
    replay_ratio: float
    x: float
    lr: float | None = None
    trial_number: int | None = _omitted()
    workers_per_trainer: float
    given: Split | None = _omitted()

    @property
    def on_policy(self) -> bool:
        return self.strategy == "on-policy"

    def lines(self) -> list[str]:
        lr = f"lr {self.lr:.3g}" if self.lr is not None and math.isfinite(self.lr) else "its lr"
        split = f"W:T about {self.workers_per_trainer:.2g}:1 (W/T ≈ mu/y, first order)"
        if self.on_policy:
            return [f"run on-policy (no buffer; asynchronously the queue) at {lr}; {split}"]
        horizon = f", horizon {self.horizon}" if self.horizon not in (None, "") else ""
        return [
            f"run {self.strategy} replay, buffer N {self.capacity}{horizon}, replay ratio y {self.replay_ratio:.3g}"
            f" (x {self.x:.3g}), {lr}; {split}"
        ]


def _pct(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{100 * v:.0f}%"


@dataclass(frozen=True, kw_only=True)
class Saving(Record):
    """A predicted saving (1 - ratio) with its 95% interval where one was measured, and what it is against."""

    share: float
    low: float | None = None
    high: float | None = None
    seeds: int | None = None
    pairs: str | None = _omitted()
    against: str | None = _omitted()

    def interval_text(self) -> str:
        if self.low is None:
            return ""
        return f" [{_pct(self.low)}, {_pct(self.high)}]"

    def lines(self) -> list[str]:
        iv = (
            ""
            if self.low is None
            else f"{self.interval_text()} (95%, {self.pairs or str(self.seeds) + ' paired seeds'})"
        )
        return [f"predicted saving against {self.against}: {_pct(self.share)} of compute{iv}"]


@dataclass(frozen=True, kw_only=True)
class BestReplay(Record):
    """The cheapest replay configuration, paired against on-policy (and in device time, for an asynchronous study),
    with whether it was re-run on fresh seeds."""

    trial_number: int
    pair: Comparison
    wall: Comparison | None = None
    configuration: Configuration
    fresh_seeds: str

    def lines(self) -> list[str]:
        return [f"fresh seeds: {self.fresh_seeds}"]


@dataclass(frozen=True, kw_only=True)
class Recommendation(Record):
    """What to run at the user's mu (`analysis.recommend`): from a study or a probe; `recommended` is None and
    `refused` says why where the data support no recommendation."""

    source: str
    study: str | None = _omitted()
    mu: float
    study_mu: float
    metric: str | None = _omitted()
    target: float | None = _omitted()
    recommended: Recommended | None = None
    saving: Saving | None = None
    notes: tuple[str, ...] = ()
    refused: str | None = _omitted()
    on_policy: Json = _omitted()
    best_replay: BestReplay | None = _omitted()
    skill: str | None = _omitted()
    model_has_skill: bool | None = _omitted()
    saving_device_time: Saving | None = _omitted()
    why_on_policy: str | None = _omitted()

    def lines(self) -> list[str]:
        """The recommendation in words, one line per fact."""
        source = f"study {self.study}" if self.source == "study" else "the probe"
        head = f"recommend at mu {self.mu:.3g} (from {source}, measured at mu {self.study_mu:.3g}"
        head += f"; {self.metric} to {self.target:g})" if self.metric and self.target is not None else ")"
        notes = [f"  note: {n}" for n in self.notes]
        if self.refused:
            return [head, f"  no recommendation: {self.refused}", *notes]
        r = self.recommended
        out = [head, f"  {r.lines()[0]}"]
        if r.on_policy:
            out.append(f"  why: {self.why_on_policy}")
        else:
            out.append(f"  {self.saving.lines()[0]}")
            if self.saving_device_time:
                w = self.saving_device_time
                out.append(f"  and of device time (wall x W + T): {_pct(w.share)}{w.interval_text()}")
            if self.best_replay:
                out.append(f"  {self.best_replay.lines()[0]}")
        if r.given is not None:
            out.append(f"  {r.given.lines()[0]}")
        return out + [f"  models: {self.skill}", *notes]


def load(text: str) -> Analysis:
    """An `analysis.json`'s text as an `Analysis` (another schema version, or not JSON: `ConfigError`, one line)."""
    import json

    try:
        data = json.loads(text)
    except ValueError as err:
        raise ConfigError(f"analysis.json: not JSON ({err})") from None
    return Analysis.from_json(data)


def dumps(result: Analysis) -> str:
    """`analysis.json`'s text."""
    import json

    return json.dumps(result.to_json(), indent=1, default=float)
