"""Differential fuzzing: random tile programs (tests/fuzz) run on the CPU device agree with a numpy model written
from docs/language.md, with the default pipeline and with each optional pass removed, some under the sanitizer.

The programs cover element-wise arithmetic on f32/f16/bf16/i8..u32/bool tiles with promotion and weak Python
numbers, casts and bitcasts, masked loads with and without `other=` (inactive elements), `where`, reductions and
scans (with axes, over wholly inactive tiles), 2-D tiles with broadcasting and `[:, None]`, loads and stores
through run-time strides, transposed addresses, unsigned offsets, `tile_load` with `bounds=`, `tile_range` loops
with loop-carried values (starting at -0.0, -inf, NaN, partly inactive tiles), runtime `if`, `dot` of
f32/f16/bf16/i8/u8 tiles with accumulators, float `//` and `%`, integer division by negative numbers, math
functions, and special values (signed zeros, infinities, NaN), checked bit for bit where the documentation makes
the result exact. Also: i64 and u64 values in all of that; shape changes on 1-D to 3-D tiles (reshape, ravel,
permute, trans, expand_dims, broadcast_to, join, split, interleave, flip); `reduce` and `associative_scan` with
combine functions of the kernel's own, gathers, sorts, topk, histograms; dots of any shape from 1, batched; atomics
with their old values (per element, uniform scalars, many elements on one address where only order-free results
are checked); and break, continue and return under traced and/or/not conditions in every kind of loop.

The seeds are fixed, so the test is deterministic. `KNOWN_BUGS` lists the constructs (and strict checks) turned
off because of bugs still open (tests/test_fuzz_findings.py holds a repro of each, as a strict xfail): delete an
entry when its bug is fixed. `python benchmarks/fuzz.py` runs the fuzzer for longer and shrinks what it finds.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from metile.ir.ops import BinOp
from metile.ir.values import Binary
from metile.rewrite.driver import bottom_up
from metile.rewrite.pipeline import DEFAULT_PIPELINE
from tests.fuzz.gen import Features
from tests.fuzz.gen_themes import gen_kernel
from tests.fuzz.runner import check_kernel, check_launch

KNOWN_BUGS = {   # Features turned off: constructs whose bugs are open (tests/test_fuzz_findings.py has each)
}

FEATURES = Features(**{name: False for name in KNOWN_BUGS})
SEEDS = range(0, 24)          # kernels of 4 programs each
pytestmark = [pytest.mark.usefixtures("on_cpu"), pytest.mark.slow]


def add_becomes_sub(n):
    match n:
        case Binary(BinOp.ADD, a, b) if n.type.dtype.is_float:
            return Binary(BinOp.SUB, a, b, loc=n.loc)
    return None


def subtract_float_adds(k):
    """A wrong pass: every float addition becomes a subtraction."""
    return bottom_up(add_becomes_sub, k)


def test_the_fuzzer_catches_a_wrong_pass(tmp_path):
    """The harness is not vacuous: programs compiled with a pass that breaks float additions disagree with the
    model, and the same programs agree when compiled right."""
    caught = []
    for seed in range(8):                    # until two kernels catch it (some seeds make no float addition)
        k = gen_kernel(seed, FEATURES, sections=2, theme="ew")
        assert not check_launch(k, tmp_path, "default", relax=FEATURES.relax())
        wrong = check_launch(k, tmp_path, "wrong", relax=FEATURES.relax(),
                             pipeline=[subtract_float_adds, *DEFAULT_PIPELINE])
        if any(f.kind == "mismatch" for f in wrong):
            caught.append(seed)
        if len(caught) == 2:
            break
    assert len(caught) == 2, caught


def check_seed(seed: int, folder: str) -> tuple[int, int, list[str]]:
    """Programs, launches and failures of the kernel of one seed (run in a worker process)."""
    k = gen_kernel(seed, FEATURES, sections=4)
    fails, n = check_kernel(k, Path(folder) / f"w{os.getpid()}", sanitize=seed % 8 == 0, relax=FEATURES.relax(),
                            variants=1, rotate=seed)
    return len(k.sections), n, [f"seed {seed}: {f}" for f in fails]


def test_random_programs_agree_with_the_model(tmp_path):
    """SEEDS kernels, in two processes: the CPU device compiles each kernel (and each pipeline variant) with the
    C++ compiler, which is most of the time."""
    t0 = time.perf_counter()
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = list(pool.map(check_seed, SEEDS, [str(tmp_path)] * len(SEEDS)))
    programs, launches = sum(r[0] for r in results), sum(r[1] for r in results)
    failures = [f for r in results for f in r[2]]
    print(f"{programs} programs, {launches} launches in {time.perf_counter() - t0:.1f} s")
    assert not failures, "\n".join(failures) + "\n(python benchmarks/fuzz.py --seed S --n 1 shrinks one)"
