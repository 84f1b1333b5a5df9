"""Where `workbench report` and `workbench analyze` write, and the guard that keeps them off files git tracks.

The rule: `--out DIR` when given; else `reports-out/NAME/` beside the study's MLflow store (the folder holding
`mlflow.db` for a SQLite store, the folder holding `mlruns/` for a file store) or in the working directory when the
store is a server. `reports-out/` gets a `.gitignore` of `*` when it is created, so a report written inside a
checkout leaves `git status` clean. Writing over a file git tracks (the committed `reports/NAME/` of this
repository, say) is refused unless asked for (`--force`).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from urllib.parse import unquote, urlparse

from workbench.config import ConfigError

REPORTS_DIR = "reports-out"
IGNORE_ALL = "# written by `workbench report`: reports are outputs; delete this file to track them with git\n*\n"


def store_folder(tracking_uri: str) -> Path | None:
    """The local folder holding an MLflow store (`sqlite:///path/mlflow.db`, `file:///path/mlruns`, a bare path), or
    None for a server (http, postgresql, ...)."""
    parsed = urlparse(tracking_uri)
    if parsed.scheme == "sqlite":
        path = tracking_uri.split(":///", 1)[1] if ":///" in tracking_uri else ""
        return Path(unquote(path)).parent if path and path != ":memory:" else None
    if parsed.scheme == "file":
        return Path(unquote(parsed.path)).parent
    if parsed.scheme == "" or len(parsed.scheme) == 1:  # a bare path (a Windows drive letter parses as a scheme)
        return Path(tracking_uri).parent
    return None


def default_out(name: str, tracking_uri: str) -> Path:
    """`reports-out/NAME/` beside the study's MLflow store, or in the working directory for a server."""
    return (store_folder(tracking_uri) or Path.cwd()) / REPORTS_DIR / name


def tracked(paths: list[Path]) -> list[Path]:
    """Those of `paths` that git tracks; none outside a git work tree or without git."""
    if not paths:
        return []
    folder = paths[0].parent
    while not folder.exists():
        folder = folder.parent
    try:
        listed = subprocess.run(
            ["git", "-C", str(folder), "ls-files", "-z", "--full-name", "--", *(str(p.resolve()) for p in paths)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        root = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if listed.returncode != 0 or root.returncode != 0:
        return []
    top = Path(root.stdout.strip())
    names = {(top / n).resolve() for n in listed.stdout.split("\0") if n}
    return [p for p in paths if p.resolve() in names]


def prepare(out: Path | None, name: str, tracking_uri: str, files: list[str], force: bool) -> Path:
    """The folder to write `files` into (created): `out`, else the default; a ConfigError naming the tracked files
    when any of them would overwrite a file git tracks and `force` is not set."""
    folder = out if out is not None else default_out(name, tracking_uri)
    clash = tracked([folder / f for f in files])
    if clash and not force:
        shown = ", ".join(p.name for p in clash[:3]) + (f" and {len(clash) - 3} more" if len(clash) > 3 else "")
        raise ConfigError(
            f"--out: {folder} holds files git tracks ({shown}); pass --force to overwrite them, or give another --out"
        )
    if out is None and not (folder.parent / ".gitignore").exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        (folder.parent / ".gitignore").write_text(IGNORE_ALL)
    folder.mkdir(parents=True, exist_ok=True)
    return folder
