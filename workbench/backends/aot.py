"""Functions compiled ahead of time with AOTInductor: built once per machine into the workbench cache, loaded by
every later process in milliseconds.

`torch.compile` pays its tracing again in every process (~3 s of Python for the decode step with a warm cache,
per shape); an AOTInductor package is a shared library plus its call signature: loading it is a `dlopen`, nothing
is traced and nothing is unpickled. `torch.export` captures the function with symbolic sizes where the caller asks
for them (rows, buffer length), so one package serves every call of a trial and of its evaluations.

A package is keyed by everything that shapes the code it holds: the caller's key (the function's own source, the
static shapes and dtypes), torch's version and the machine (architecture and CPU flags), so a cache directory
shared between different machines never hands one a library built for another.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import warnings
from functools import cache
from pathlib import Path
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree

from workbench.cache import build_once

FORMAT = 1
"""Bumped when the way packages are built changes."""


@cache
def machine_tag() -> str:
    """The platform, architecture and CPU feature flags: what the compiled kernels were specialised for."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].strip() for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        flags = platform.processor()
    return f"{platform.system()}-{platform.machine()}-{hashlib.sha256(flags.encode()).hexdigest()[:12]}"


def available() -> str | None:
    """Why AOTInductor packages cannot be built or loaded here, or None when they can."""
    if not hasattr(torch._C, "_aoti") or not hasattr(torch._C._aoti, "AOTIModelPackageLoader"):
        return "this torch has no AOTInductor package loader"
    return None


def package_path(cache_dir: Path, name: str, key: dict[str, Any]) -> Path:
    """Where the package of `name` for `key` lives under the workbench cache."""
    full = {"format": FORMAT, "torch": torch.__version__, "machine": machine_tag(), **key}
    digest = hashlib.sha256(json.dumps(full, sort_keys=True, default=str).encode()).hexdigest()[:24]
    return cache_dir / "aot" / f"{name}-{digest}.pt2"


class Package:
    """A loaded package, called like the function it was built from (same argument structure, tensors only)."""

    def __init__(self, path: Path):
        self.path = path
        self._loader = torch._C._aoti.AOTIModelPackageLoader(str(path), "model", False, 1, -1)
        in_spec, out_spec = self._loader.get_call_spec()
        self._in_spec, self._out_spec = pytree.treespec_loads(in_spec), pytree.treespec_loads(out_spec)
        self._checked: set[tuple] = set()

    def __call__(self, *args):
        # A decode loop calls its package ~30 times per generation with the same argument structure: the full
        # structure check (a pytree flatten, ~0.2 ms) runs once per layout of leaves, later calls only collect them.
        flat: list = []
        layout = tuple(_leaves(args, flat))
        if layout not in self._checked:
            if pytree.tree_flatten((args, {}))[1] != self._in_spec:
                raise TypeError(f"{self.path.name}: called with arguments of another structure than it was built for")
            self._checked.add(layout)
        return pytree.tree_unflatten(self._loader.boxed_run(flat), self._out_spec)


def _leaves(x, out: list):
    """Collect the tensors of nested lists, tuples and dicts into `out` (pytree's order); yield the path shape
    (container types, lengths, dict keys) that identifies the structure."""
    if isinstance(x, torch.Tensor):
        out.append(x)
        yield "t"
    elif isinstance(x, (list, tuple)):
        yield (type(x).__name__, len(x))
        for y in x:
            yield from _leaves(y, out)
    elif isinstance(x, dict):
        yield tuple(x)
        for y in x.values():
            yield from _leaves(y, out)
    else:
        yield repr(x) if x is None else type(x).__name__


class _Exported(torch.nn.Module):
    def __init__(self, fn: Callable):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def build(fn: Callable, example: tuple, dynamic_shapes: tuple, path: Path) -> None:
    """Export `fn` on `example` (sizes marked in `dynamic_shapes` stay symbolic) and compile it into a package at
    `path`. Arguments `fn` writes into stay writable (export records the mutation and the package writes back into
    the caller's tensors), but at the price of a whole copy of each per call: a hot function should return what it
    would write and leave the writing to its caller, as the decode step does with its KV buffers."""
    import torch._inductor  # the compiler: loaded only when a package is built

    staging = path.with_name(path.name + ".pt2")  # the packager wants the suffix
    with warnings.catch_warnings():
        # torch's export copies its own tree specs through a deprecated `isinstance(treespec, LeafSpec)` check and
        # warns about it (a FutureWarning from torch's internals, twice a compile): nothing a user can act on
        warnings.filterwarnings(
            "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
        )
        program = torch.export.export(
            _Exported(fn), example, dynamic_shapes=(dynamic_shapes,), strict=False
        )  # one entry: *args
        torch._inductor.aoti_compile_and_package(program, package_path=str(staging))
    os.replace(staging, path)


def load_or_build(path: Path, fn: Callable, example: Callable[[], tuple], dynamic_shapes: tuple) -> Package:
    """The package at `path`, built first (under the cache's file lock, so concurrent workers build it once) when
    this machine has none yet."""
    build_once(path, lambda tmp: build(fn, example(), dynamic_shapes, tmp))
    return Package(path)
