"""`metile.autotune`, `metile.Config` and `[grid].prepare` of an autotuned kernel, on the CPU device: the
original meTile's autotuned GEMM (two configurations, key M/N/K, a grid computed from the chosen one), an FFT
whose stages are prepared once and dispatched again, pruning and failures with their messages, and choices kept
on disk and reused by later processes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import metile
import metile.autotune_run
from metile import cache
from metile.autotune import AutotuneError
from metile.kernel import JITKernel
from metile.launch import PreparedLaunch

pytestmark = pytest.mark.usefixtures("on_cpu", "tuning_dir")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tuning_dir(tmp_path, monkeypatch):
    """Choices are stored under a directory of the test's own (kernels still compile into the usual cache)."""
    monkeypatch.setenv("METILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("METILE_AUTOTUNE", raising=False)
    return tmp_path / "cache"


GEMM_CONFIGS = [metile.Config(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, num_simdgroups=4),
                metile.Config(BLOCK_M=64, BLOCK_N=32, BLOCK_K=32, num_simdgroups=4, num_stages=2)]


def gemm_grid(meta):
    return (metile.cdiv(meta["M"], meta["BLOCK_M"]), metile.cdiv(meta["N"], meta["BLOCK_N"]))


def make_gemm(**options):
    @metile.autotune(configs=GEMM_CONFIGS, key=["M", "N", "K"], warmup=1, rep=2, **options)
    @metile.kernel
    def matmul(A, B, C, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr):
        pid_m, pid_n = metile.program_id(0), metile.program_id(1)
        acc = metile.zeros((BLOCK_M, BLOCK_N), dtype=metile.float32)
        for k in metile.tile_range(0, K, BLOCK_K):
            a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K), bounds=(M, K))
            b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N), bounds=(K, N))
            acc = metile.dot(a, b, acc)
        metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N), bounds=(M, N))

    return matmul


@pytest.mark.parametrize("shape", [(70, 45, 37), (64, 64, 64), (5, 100, 9)])
def test_the_autotuned_gemm_matches_numpy_for_every_shape(shape, capsys):
    M, N, K = shape
    matmul = make_gemm(verbose=True)
    rng = np.random.default_rng(M * N * K)
    a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    matmul[gemm_grid](a, b, c, M, N, K)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    (chosen,) = matmul.cache.values()
    assert chosen in GEMM_CONFIGS
    report = capsys.readouterr().out
    assert f"autotune matmul [M={M}, N={N}, K={K}]: {chosen!r}" in report
    assert all(f"{c!r}: " in report and " ms" in report for c in GEMM_CONFIGS)
    c[:] = 0
    matmul[gemm_grid](a, b, c, M, N, K)      # chosen once per key: no second tuning, no report
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    assert capsys.readouterr().out == "" and len(matmul.cache) == 1


def test_each_key_and_argument_type_is_tuned_once(monkeypatch):
    matmul = make_gemm()
    tunings = []
    real = metile.autotune_run.tune
    monkeypatch.setattr(metile.autotune_run, "tune", lambda *a: tunings.append(a[-1]) or real(*a))
    for M, dtype in [(40, np.float32), (40, np.float32), (41, np.float32), (40, np.float16)]:
        a, b = np.ones((M, 16), dtype), np.ones((16, 24), dtype)
        c = np.zeros((M, 24), np.float32)
        matmul[gemm_grid](a, b, c, M, 24, 16)
        np.testing.assert_array_equal(c, 16.0)
    assert len(tunings) == 3 and len(matmul.cache) == 3


@metile.kernel
def fft_stage(Re, Im, n, half, BLOCK: metile.constexpr):
    """One radix-2 stage, in place: butterfly i joins elements a and a + half of its group of 2 * half."""
    i = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = i < n // 2
    a = (i // half) * (2 * half) + i % half
    b = a + half
    angle = (i % half).to(metile.float32) * (-3.141592653589793 / half)
    wr, wi = metile.cos(angle), metile.sin(angle)
    ar, ai = metile.load(Re + a, mask=live), metile.load(Im + a, mask=live)
    br, bi = metile.load(Re + b, mask=live), metile.load(Im + b, mask=live)
    tr, ti = wr * br - wi * bi, wr * bi + wi * br
    metile.store(Re + a, ar + tr, mask=live)
    metile.store(Im + a, ai + ti, mask=live)
    metile.store(Re + b, ar - tr, mask=live)
    metile.store(Im + b, ai - ti, mask=live)


@pytest.mark.parametrize("n", [256, 2048])
def test_fft_stages_prepared_once_and_dispatched_again(n):
    tuned = metile.autotune(configs=[metile.Config(BLOCK=64), metile.Config(BLOCK=256)], key=["n"], warmup=1, rep=2,
                            restore_value=["Re", "Im"])(fft_stage)
    x = np.random.default_rng(n).standard_normal(n) + 1j * np.random.default_rng(n + 1).standard_normal(n)
    bits = n.bit_length() - 1
    order = [int(format(i, f"0{bits}b")[::-1], 2) for i in range(n)]
    re, im = np.ascontiguousarray(x.real[order], np.float32), np.ascontiguousarray(x.imag[order], np.float32)
    grid = lambda meta: (metile.cdiv(meta["n"] // 2, meta["BLOCK"]),)  # noqa: E731
    stages = [tuned[grid].prepare(re, im, n, 1 << s) for s in range(bits)]
    assert isinstance(stages[0], PreparedLaunch)
    for _ in range(2):                  # the prepared stages run again on whatever the arrays hold
        re[:], im[:] = x.real[order], x.imag[order]
        for stage in stages:
            stage()
        np.testing.assert_allclose(re + 1j * im, np.fft.fft(x), rtol=1e-3, atol=1e-3 * np.sqrt(n))
    assert len(tuned.cache) == 1        # one key (n); the stages' other arguments do not choose


@metile.kernel
def accumulate(X, Total, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    metile.atomic_add(Total + 0 * offs, metile.load(X + offs, mask=offs < n), mask=offs < n)


def test_reset_to_zero_keeps_timing_out_of_an_accumulated_result():
    x = np.random.default_rng(0).random(1000).astype(np.float32)
    for reset, right, blocks in ((["Total"], True, (128, 256)), (None, False, (64, 128))):   # (other configs:
        tuned = metile.autotune(configs=[metile.Config(BLOCK=b) for b in blocks], key=["n"],   # not a stored choice)
                                warmup=2, rep=3, reset_to_zero=reset)(accumulate)
        total = np.zeros(1, np.float32)
        tuned[lambda m: (metile.cdiv(m["n"], m["BLOCK"]),)](x, total, 1000)
        assert np.isclose(total[0], x.sum(), rtol=1e-4) == right


def test_unrunnable_configurations_are_pruned_before_compiling_with_the_reason(capsys, monkeypatch):
    compiled = []
    real = JITKernel._compile
    monkeypatch.setattr(JITKernel, "_compile",
                        lambda self, spec, settings, **kw: compiled.append(spec[2]) or real(self, spec, settings, **kw))
    big = metile.Config(BLOCK_M=1024, BLOCK_N=8, BLOCK_K=8, num_simdgroups=4)   # 48 KB to stage 8 columns of a
    ok = metile.Config(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
    matmul = make_gemm(verbose=True)
    tuned = metile.autotune(configs=[big, ok], key=["M"], warmup=1, rep=1, verbose=True)(matmul.kernel)
    a = np.ones((40, 16), np.float32)
    c = np.zeros((40, 40), np.float32)
    tuned[gemm_grid](a, np.ones((16, 40), np.float32), c, 40, 40, 16)
    np.testing.assert_array_equal(c, 16.0)
    out = capsys.readouterr().out
    assert f"{big!r}: pruned: it needs " in out and "bytes of threadgroup memory, the device has 32768" in out
    assert all(spec["BLOCK_M"] == 32 for spec in compiled)     # the pruned configuration never compiled


def test_configurations_that_fail_are_skipped_and_all_failing_is_one_error():
    @metile.kernel
    def unmasked(X, Y, n, BLOCK: metile.constexpr):
        offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
        metile.store(Y + offs, metile.load(X + offs) * 2.0)

    faults = metile.Config(BLOCK=128)            # reads past the end of a 100-element array
    bad = metile.Config(BLOCK=8, num_stages=9)   # at most 8 stages
    fits = metile.Config(BLOCK=4)
    x, y = np.arange(100, dtype=np.float32), np.zeros(100, np.float32)
    grid = lambda m: (metile.cdiv(m["n"], m["BLOCK"]),)  # noqa: E731
    tuned = metile.autotune(configs=[faults, bad, fits], key=["n"], warmup=1, rep=1)(unmasked)
    tuned[grid](x, y, 100)
    np.testing.assert_array_equal(y, 2 * x)
    assert tuned.cache[(100, np.dtype(np.float32), np.dtype(np.float32))] == fits
    hopeless = metile.autotune(configs=[faults, bad], key=["n"], warmup=1, rep=1)(unmasked)
    with pytest.raises(AutotuneError) as e:
        hopeless[grid](x, y, 100)
    text = str(e.value)
    assert "autotune unmasked: no configuration could run for n=100:" in text
    assert f"{faults!r}: failed while timed: DeviceFault:" in text and "invalid memory access" in text
    assert f"{bad!r}: does not compile: KernelArgumentError:" in text and "num_stages=9 must be an int" in text


def test_user_pruning_runs_first():
    configs = [metile.Config(BLOCK=b) for b in (32, 64, 128, 256)]
    seen = {}

    def early(cs, named, **kwargs):
        seen["named"] = sorted(named)
        return [c for c in cs if c.kwargs["BLOCK"] >= 64]

    tuned = metile.autotune(configs=configs, key=["n"], warmup=1, rep=1, prune_configs_by={
        "early_config_prune": early, "perf_model": lambda BLOCK, **rest: -BLOCK, "top_k": 1})(accumulate)
    total = np.zeros(1, np.float32)
    tuned[lambda m: (metile.cdiv(m["n"], m["BLOCK"]),)](np.ones(500, np.float32), total, 500)
    assert list(tuned.cache.values()) == [configs[3]]    # the only one left: the model's best of 64, 128, 256
    assert seen["named"] == ["Total", "X", "n"]


@pytest.mark.parametrize(("settings", "message"), [
    ({"configs": [], "key": ["n"]}, "configs is empty"),
    ({"configs": [metile.Config(BLOK=4)], "key": ["n"]}, "sets 'BLOK', which is not a parameter of the kernel"),
    ({"configs": [metile.Config(n=4)], "key": ["n"]}, "sets 'n', which is a runtime argument"),
    ({"configs": [metile.Config(BLOCK=4)], "key": ["m"]}, "key names 'm', which is not a parameter"),
    ({"configs": [metile.Config(BLOCK=4)], "key": "n"}, "key is a list of argument names"),
    ({"configs": [metile.Config(BLOCK=4)], "key": ["n"], "rep": 0}, "rep=0 must be a whole number"),
    ({"configs": [metile.Config(BLOCK=4)], "key": ["n"], "reset_to_zero": ["BLOCK"]}, "'BLOCK', a constexpr"),
    ({"configs": [metile.Config(BLOCK=4)], "key": ["n"], "prune_configs_by": {"top": 1}}, "not top"),
    ({"configs": [metile.Config(BLOCK=4), metile.Config(BLOCK=4)], "key": ["n"]}, "the same Config twice"),
])
def test_bad_autotune_arguments_are_refused_at_the_kernel(settings, message):
    with pytest.raises(AutotuneError, match=message) as e:
        metile.autotune(**settings)(accumulate)
    assert e.value.loc is not None and e.value.loc.file.endswith("test_autotune.py")


def test_a_launch_that_sets_what_the_autotuner_chooses_is_refused(monkeypatch):
    tuned = metile.autotune(configs=[metile.Config(BLOCK=64)], key=["n"], warmup=1, rep=1)(accumulate)
    x, total = np.ones(64, np.float32), np.zeros(1, np.float32)
    with pytest.raises(AutotuneError, match="gives BLOCK, which the autotuner chooses"):
        tuned[(1,)](x, total, 64, BLOCK=64)
    tuned[(1,)](x, total, 64)
    with pytest.raises(AutotuneError, match="gives BLOCK, which the autotuner chooses"):
        tuned[(1,)](x, total, 64, BLOCK=64)          # refused on the fast path too
    monkeypatch.setenv("METILE_AUTOTUNE", "sometimes")
    with pytest.raises(AutotuneError, match="METILE_AUTOTUNE='sometimes'"):
        tuned[(1,)](x, total, 65)


def test_autotune_off_launches_the_first_configuration_without_timing(monkeypatch):
    monkeypatch.setenv("METILE_AUTOTUNE", "off")
    monkeypatch.setattr(metile.autotune_run, "tune", lambda *a: pytest.fail("timed with METILE_AUTOTUNE=off"))
    configs = [metile.Config(BLOCK=256), metile.Config(BLOCK=64)]
    tuned = metile.autotune(configs=configs, key=["n"])(accumulate)
    total = np.zeros(1, np.float32)
    tuned[lambda m: (metile.cdiv(m["n"], m["BLOCK"]),)](np.ones(300, np.float32), total, 300)
    assert total[0] == 300 and list(tuned.cache.values()) == [configs[0]]


CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import metile, metile.autotune_run
    sys.path.insert(0, {tests!r})
    from test_autotune import accumulate
    if sys.argv[1] == "reuse":
        metile.autotune_run.tune = lambda *a: sys.exit("tuned again")
    tuned = metile.autotune(configs=[metile.Config(BLOCK=64), metile.Config(BLOCK=128)], key=["n"], warmup=1,
                            rep=1, reset_to_zero=["Total"])(accumulate)
    total = np.zeros(1, np.float32)
    tuned[lambda m: (metile.cdiv(m["n"], m["BLOCK"]),)](np.ones(777, np.float32), total, 777)
    assert total[0] == 777, total
    print(repr(list(tuned.cache.values())[0]))
""")


def _child(mode: str, env: dict) -> subprocess.CompletedProcess:
    code = CHILD.format(tests=str(ROOT / "tests"))
    return subprocess.run([sys.executable, "-c", code, mode], env=env, capture_output=True, text=True, timeout=600)


def test_a_choice_is_stored_on_disk_and_reused_by_another_process(tuning_dir):
    import os

    env = {**os.environ, "METILE_CACHE_DIR": str(tuning_dir), "METILE_DEVICE": "cpu"}
    first = _child("tune", env)
    assert first.returncode == 0, first.stderr
    again = _child("reuse", env)
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    (entry,) = cache.read_choices(tuning_dir).values()
    assert entry["kernel"] == "accumulate" and entry["repr"] == first.stdout.strip()


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from metile import cache
    for i in range(40):
        cache.store_choice(f"{sys.argv[1]}-{i}", {"config": i}, Path(sys.argv[2]))
""")


def test_concurrent_writers_keep_every_choice(tuning_dir):
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, name, str(tuning_dir)]) for name in ("a", "b", "c")]
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0]
    choices = json.loads((tuning_dir / "autotune" / "choices.json").read_text())
    assert sorted(choices) == sorted(f"{n}-{i}" for n in "abc" for i in range(40))


def test_cache_info_and_clear_from_the_command_line(tuning_dir):
    cache.store_choice("x", {"config": 0}, tuning_dir)
    from metile.__main__ import main

    assert main(["cache", "info"]) == 0
    assert main(["cache", "clear"]) == 0
    assert cache.read_choices(tuning_dir) == {}
