"""Differential fuzzing: random tile programs (tests/fuzz) run on the CPU device agree with a numpy model written
from docs/language.md, with the default pipeline and with each optional pass removed, some under the sanitizer.

The programs cover element-wise arithmetic on f32/f16/bf16/i8..u32/bool tiles with promotion and weak Python
numbers, casts and bitcasts, masked loads with and without `other=` (inactive elements), `where`, reductions and
scans (with axes, over wholly inactive tiles), 2-D tiles with broadcasting and `[:, None]`, loads and stores
through run-time strides, transposed addresses, unsigned offsets, `tile_load` with `bounds=`, `tile_range` loops
with loop-carried values (starting at -0.0, -inf, NaN, partly inactive tiles), runtime `if`, `dot` of
f32/f16/bf16/i8/u8 tiles with accumulators, float `//` and `%`, integer division by negative numbers, math
functions, and special values (signed zeros, infinities, NaN), checked bit for bit where the documentation makes
the result exact.

The seeds are fixed, so the test is deterministic. `KNOWN_BUGS` lists the constructs (and strict checks) turned
off because of bugs still open (tests/test_fuzz_findings.py holds a repro of each, as a strict xfail): delete an
entry when its bug is fixed. `python benchmarks/fuzz.py` runs the fuzzer for longer and shrinks what it finds.
"""

from __future__ import annotations

import time

import pytest

from tests.fuzz.gen import Features
from tests.fuzz.gen_themes import gen_kernel
from tests.fuzz.runner import check_kernel

KNOWN_BUGS = {
    "unsigned_ptr_sub": "P - offsets with unsigned offsets addresses P + offsets (test_fuzz_findings)",
    "prestrided_rows": "(arange * stride)[:, None] + cols is taken as aligned for vector loads",
    "bool_reduce_inactive": "max of an all-inactive bool tile gives True",
    "int_dot_big": "an integer dot accumulates in f32, inexact past 2**24",
    "unsigned_math": "sigmoid of unsigned integers",
    "drop_skip_inactive": "a pipeline without skip_inactive is neither refused nor right",
    "loop_zero_sign": "a masked loop-carried -0.0 becomes +0.0",
    "divmod_zero_sign": "float // and % lose the sign of a zero result",
    "lowp_dot_acc": "a dot with an f16/bf16 accumulator rounds twice",
}

FEATURES = Features(**{name: False for name in KNOWN_BUGS})
SEEDS = range(0, 40)          # kernels of 1 to 4 programs each
pytestmark = [pytest.mark.usefixtures("on_cpu"), pytest.mark.slow]


def test_random_programs_agree_with_the_model(tmp_path):
    t0 = time.perf_counter()
    failures, programs, launches = [], 0, 0
    for seed in SEEDS:
        k = gen_kernel(seed, FEATURES)
        fails, n = check_kernel(k, tmp_path, sanitize=seed % 8 == 0, relax=FEATURES.relax())
        programs += len(k.sections)
        launches += n
        failures += [f"seed {seed}: {f}" for f in fails]
    print(f"{programs} programs, {launches} launches in {time.perf_counter() - t0:.1f} s")
    assert not failures, "\n".join(failures) + "\n(python benchmarks/fuzz.py --known --seed S --n 1 shrinks one)"
