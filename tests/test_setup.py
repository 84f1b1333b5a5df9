"""The set-up's choice of torch build: PyTorch's CPU wheel index by default (the public PyPI's Linux torch is the
CUDA build), overridable, and a quick fall-back where the index does not answer. No network: a fake `pip` records
what it was asked and a local HTTP server plays the index."""

from __future__ import annotations

import http.server
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH_PIN = next(
    line for line in (ROOT / "requirements-cpu.txt").read_text().splitlines() if line.startswith("torch==")
)


def _fake_bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pip = bin_dir / "pip"
    pip.write_text(f'#!/bin/sh\necho "$@" > {tmp_path / "pip-args"}\necho "Collecting torch"\n')
    pip.chmod(0o755)
    return bin_dir


def _make(tmp_path: Path, *variables: str) -> tuple[str, str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(
        ["make", "--no-print-directory", "-s", "setup-torch", f"BIN={_fake_bin(tmp_path)}", *variables],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout, (tmp_path / "pip-args").read_text().strip()


def test_setup_names_the_cpu_wheel_index_by_default():
    makefile = (ROOT / "Makefile").read_text()
    assert f"TORCH_INDEX ?= {CPU_INDEX}" in makefile  # `?=`: a make variable or the environment overrides it
    dry = subprocess.run(
        ["make", "-n", "-B", ".venv/.installed"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    assert f"--extra-index-url {CPU_INDEX}" in dry.stdout
    assert TORCH_PIN in dry.stdout


def test_an_answering_index_is_used_and_the_override_wins(tmp_path):
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler
    )  # any answer, 404 too
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        index = f"http://127.0.0.1:{server.server_port}/whl/cu128"
        _, args = _make(tmp_path, f"TORCH_INDEX={index}")
    finally:
        server.shutdown()
    assert args.split() == ["install", "--extra-index-url", index, TORCH_PIN]


def test_an_index_that_does_not_answer_costs_seconds_and_says_so(tmp_path):
    start = time.monotonic()
    out, args = _make(tmp_path, "TORCH_INDEX=http://127.0.0.1:9/whl/cpu")  # port 9 (discard): refused at once
    assert time.monotonic() - start < 10
    assert "did not answer within 3 s" in out
    assert args.split() == ["install", TORCH_PIN]


def test_an_empty_index_takes_pips_configured_index(tmp_path):
    out, args = _make(tmp_path, "TORCH_INDEX=")
    assert "pip's configured index" in out
    assert args.split() == ["install", TORCH_PIN]
