"""A stopped study's SQLite stores as one file, and back: a study resumes on another machine, or in a later session
whose disk did not keep the first one's, without a shared database (`workbench study pack` / `unpack`).

- `pack` copies the Optuna and MLflow databases with SQLite's backup API (a consistent copy, WAL included), keeps
  every run with its params, tags and final metric values, and of the per-step histories only those the analysis
  reads (`eval/*` and `tracking.ANALYSED_HISTORIES`): the rest (losses, ratios, buffer ages) is most of a study's
  rows and is dropped, which the manifest says. The runs' artifacts (curves, per-seed tables) go with them, in an
  xz-compressed tar with a manifest. A running study is refused: stop it first (its trials are requeued).
- `unpack` restores them where the spec's storage and tracking URI point, refuses to write over a store that
  exists (nothing recorded is lost), extracts only the files a pack holds (tarfile's `data` filter), and moves the
  artifact locations the MLflow store records to the new place.

SQLite stores only: a PostgreSQL database or an MLflow server already outlives the machine.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import tarfile
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from optuna.trial import TrialState

from workbench import tracking
from workbench.config import ConfigError

FORMAT = 1
MANIFEST = "manifest.json"
OPTUNA_DB, MLFLOW_DB, ARTIFACTS = "optuna.db", "mlflow.db", "mlruns"


@dataclass(frozen=True)
class Stores:
    """Where a study's SQLite stores live: the Optuna database, the MLflow database and its artifacts beside it."""

    optuna_db: Path
    mlflow_db: Path

    @property
    def artifacts(self) -> Path:
        return self.mlflow_db.parent / ARTIFACTS

    @classmethod
    def of(cls, storage_url: str, tracking_uri: str) -> "Stores":
        def path(field: str, url: str) -> Path:
            if not url.startswith("sqlite:///") or url in ("sqlite:///", "sqlite:///:memory:"):
                raise ConfigError(
                    f"{field}: pack and unpack move SQLite files (sqlite:///PATH), not {tracking.redact_url(url)}"
                    " (a database server outlives the machine already)"
                )
            return Path(url[len("sqlite:///") :])

        return cls(path("storage", storage_url), path("tracking_uri", tracking_uri))


def _artifact_root(mlflow_db: Path) -> str:
    """The `file://` prefix of every artifact location a study's SQLite MLflow store records
    (`tracking.artifact_location`)."""
    return (mlflow_db.parent.resolve() / ARTIFACTS).as_uri()


def _copy_db(src: Path, dst: Path) -> None:
    source, target = sqlite3.connect(f"file:{src}?mode=ro", uri=True), sqlite3.connect(dst)
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()


def _slim(mlflow_db: Path) -> tuple[int, int]:
    """Drop the metric histories the analysis does not read; (rows kept, rows dropped)."""
    keep = tuple(tracking.ANALYSED_HISTORIES)
    marks = ",".join("?" * len(keep))
    con = sqlite3.connect(mlflow_db)
    try:
        (total,) = con.execute("SELECT COUNT(*) FROM metrics").fetchone()
        con.execute(f"DELETE FROM metrics WHERE key NOT LIKE 'eval/%' AND key NOT IN ({marks})", keep)
        con.commit()
        (kept,) = con.execute("SELECT COUNT(*) FROM metrics").fetchone()
        con.execute("VACUUM")
    finally:
        con.close()
    return kept, total - kept


def pack(study, stores: Stores, out: Path) -> dict:
    """Write `out` (a `.tar.xz`) from the stores of `study` (an `optuna.Study` loaded from them); the manifest."""
    running = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    if running:
        raise ConfigError(
            f"study pack: study {study.study_name} has trials running ({', '.join(map(str, running[:5]))}"
            f"{', ...' if len(running) > 5 else ''}): stop it first (SIGTERM or Ctrl-C requeues them)"
            " or mark a dead worker's with `workbench study status SPEC --fail-stale`"
        )
    for path in (stores.optuna_db, stores.mlflow_db):
        if not path.is_file():
            raise ConfigError(f"study pack: no store at {path}")
    states: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        states[t.state.name.lower()] = states.get(t.state.name.lower(), 0) + 1
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _copy_db(stores.optuna_db, work / OPTUNA_DB)
        _copy_db(stores.mlflow_db, work / MLFLOW_DB)
        kept, dropped = _slim(work / MLFLOW_DB)
        manifest = {
            "format": FORMAT,
            "study": study.study_name,
            "packed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "trials": states,
            "artifact_root": _artifact_root(stores.mlflow_db),
            "metric_rows": {"kept": kept, "dropped": dropped},
            "histories_kept": ["eval/*", *tracking.ANALYSED_HISTORIES],
        }
        (work / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(out.name + ".partial")
        with tarfile.open(partial, "w:xz") as tar:
            for name in (MANIFEST, OPTUNA_DB, MLFLOW_DB):
                tar.add(work / name, arcname=name)
            if stores.artifacts.is_dir():
                tar.add(stores.artifacts, arcname=ARTIFACTS)
        partial.replace(out)
    return manifest


def trials_line(manifest: dict) -> str:
    """The packed study's trials by state, one phrase (`18 complete, 2 fail, 79 waiting`)."""
    return ", ".join(f"{n} {state}" for state, n in sorted(manifest["trials"].items()))


def _members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """The pack's members, refused where one is not a file or folder a pack writes."""
    members = []
    for m in tar.getmembers():
        top = m.name.split("/", 1)[0]
        if not (m.isfile() or m.isdir()) or top not in (MANIFEST, OPTUNA_DB, MLFLOW_DB, ARTIFACTS) or ".." in m.name:
            raise ConfigError(f"study unpack: {m.name!r} is not part of a study pack")
        members.append(m)
    return members


def unpack(archive: Path, name: str, stores: Stores) -> dict:
    """Restore the pack `archive` of study `name` into `stores`; the manifest. Nothing is written where a store exists."""
    if not archive.is_file():
        raise ConfigError(f"study unpack: no file {archive}")
    present = [p for p in (stores.optuna_db, stores.mlflow_db, stores.artifacts) if p.exists()]
    if present:
        raise ConfigError(
            f"study unpack: {present[0]} exists; unpack writes only where the study has no store"
            " (move it away to restore the pack)"
        )
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(archive, "r:xz") as tar:
        work = Path(tmp)
        tar.extractall(work, members=_members(tar), filter="data")
        try:
            manifest = json.loads((work / MANIFEST).read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(f"study unpack: {archive} has no readable {MANIFEST} ({e})") from None
        if manifest.get("format") != FORMAT or manifest.get("study") != name:
            raise ConfigError(
                f"study unpack: {archive} packs study {manifest.get('study')!r} (format {manifest.get('format')}),"
                f" not {name!r}"
            )
        for f in (OPTUNA_DB, MLFLOW_DB):
            if not (work / f).is_file():
                raise ConfigError(f"study unpack: {archive} lacks {f}")
        _move_artifacts(work / MLFLOW_DB, manifest["artifact_root"], _artifact_root(stores.mlflow_db))
        for path in (stores.optuna_db, stores.mlflow_db):
            path.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(work / OPTUNA_DB, stores.optuna_db)
        shutil.move(work / MLFLOW_DB, stores.mlflow_db)
        if (work / ARTIFACTS).is_dir():
            shutil.move(work / ARTIFACTS, stores.artifacts)
    return manifest


def _move_artifacts(mlflow_db: Path, old: str, new: str) -> None:
    """Point the experiment and run artifact locations recorded under `old` at `new`."""
    con = sqlite3.connect(mlflow_db)
    try:
        for table, column in (("experiments", "artifact_location"), ("runs", "artifact_uri")):
            con.execute(
                f"UPDATE {table} SET {column} = ? || substr({column}, ?) WHERE substr({column}, 1, ?) = ?",
                (new, len(old) + 1, len(old), old),
            )
        con.commit()
    finally:
        con.close()
