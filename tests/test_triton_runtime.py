"""The host side of `triton` served by metile: `triton.jit` and its options, launch options, `warmup` and compiled
kernels, helpers, `triton.autotune`/`Config`/`heuristics`, `triton.testing`, the active driver and the version."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import metile.triton as triton
import metile.triton.language as tl
from metile.autotune import AutotuneError
from metile.frontend.errors import KernelArgumentError, OutsideKernelError

pytestmark = pytest.mark.usefixtures("on_cpu")


@triton.jit
def leaky(x):
    return tl.where(x >= 0, x, 0.01 * x)


@triton.jit()
def scale(X, Out, n, factor, BLOCK: tl.constexpr, ACT: tl.constexpr = ""):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask) * factor
    if ACT == "leaky":
        x = leaky(x)
    tl.store(Out + offs, x, mask=mask)


@triton.jit(do_not_specialize=[2], debug=True, noinline=True)
def scale_plain(X, Out, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(Out + offs, tl.load(X + offs, mask=offs < n), mask=offs < n)


def test_jit_forms_helpers_and_launch_options():
    x = torch.linspace(-1, 1, 200)
    out = torch.empty_like(x)
    grid = lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)   # noqa: E731 - as Triton programs write it
    scale[grid](x, out, 200, 2.0, BLOCK=64, ACT="leaky", num_warps=2, num_stages=2, num_ctas=1, maxnreg=64,
                enable_fp_fusion=False, waves_per_eu=2)
    want = torch.where(2 * x >= 0, 2 * x, 0.02 * x)
    assert torch.allclose(out, want)
    assert scale_plain.kernel.do_not_specialize == frozenset({"n"})
    assert scale_plain.noinline is True and scale_plain.debug is True
    scale_plain[(1,)](x, out, 16, 16)
    assert torch.equal(out[:16], x[:16])
    with pytest.raises(OutsideKernelError, match="launch it with scale\\[grid\\]"):
        scale(x, out, 1, 1.0, 64)
    with pytest.raises(KernelArgumentError, match="num_warps|num_simdgroups"):
        scale[(1,)](x, out, 16, 1.0, BLOCK=16, num_warps=64)


def test_warmup_gives_a_compiled_kernel_with_tritons_attributes():
    x = np.arange(100, dtype=np.float32)
    out = np.zeros(100, np.float32)
    k = scale.warmup(x, out, 100, 3.0, BLOCK=128, num_warps=8, grid=(1,))
    k._init_handles()
    assert k.n_regs > 0 and k.n_spills == 0 and k.metadata.num_warps == 8
    assert k.metadata.shared >= 0 and "kernel void" in k.asm["msl"] and k.name == "scale"
    k[(1, 1, 1)](x, out, 100, 3.0, 128)     # all the arguments, constexprs included, by position
    assert (out == 3 * x).all()
    launched = scale[(1,)](x, out, 100, 1.0, BLOCK=128)
    assert launched.metadata.name == "scale"


def test_autotune_chooses_per_key_and_runs_hooks():
    calls = []

    def prune(configs, named, **kwargs):
        calls.append(("prune", sorted(named)))
        return [c for c in configs if c.kwargs["BLOCK"] != 512]

    def model(**kwargs):
        return kwargs["BLOCK"]

    def hook(nargs):
        calls.append(("hook", nargs["BLOCK"]))

    configs = [triton.Config({"BLOCK": 32}, num_warps=1, pre_hook=hook), triton.Config({"BLOCK": 64}, num_warps=2),
               triton.Config({"BLOCK": 128}, num_warps=4, num_stages=2), triton.Config({"BLOCK": 512})]

    @triton.autotune(configs=configs, key=["n"], prune_configs_by={"early_config_prune": prune, "perf_model": model,
                     "top_k": 2}, reset_to_zero=["Out"], warmup=1, rep=1, use_cuda_graph=False)
    @triton.jit
    def accumulate(X, Out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.atomic_add(Out + offs, tl.load(X + offs, mask=offs < n), mask=offs < n)

    x = np.ones(256, np.float32)
    out = np.zeros(256, np.float32)
    accumulate[lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)](x, out, 256)
    assert (out == 1).all()                      # zeroed before each timed launch and before the last one
    assert accumulate.best_config.kwargs["BLOCK"] in (32, 64) and len(accumulate.configs_timings) == 2
    assert ("prune", ["Out", "X", "n"]) in calls and ("hook", 32) in calls
    assert configs[2].all_kwargs() == {"BLOCK": 128, "num_warps": 4, "num_ctas": 1, "num_stages": 2}
    assert accumulate.cache and str(configs[0]).startswith("BLOCK: 32, num_warps: 1")


def test_autotune_times_configurations_that_launch_the_same_kernel_once():
    """`num_stages` and `num_ctas` change nothing in this kernel: of six configurations, the two block sizes are
    timed, the others take their twin's timing, and the first of twins is chosen."""
    timed = []

    def bench(fn, quantiles):
        fn()
        timed.append(1)
        return [float(len(timed))] * 3   # the first timed is the fastest

    configs = [triton.Config({"BLOCK": b}, num_stages=s, num_ctas=c) for b in (64, 128) for s, c in
               ((1, 1), (2, 1), (3, 2))]

    @triton.autotune(configs=configs, key=["n"], do_bench=bench)
    @triton.jit
    def twice(X, Out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(Out + offs, tl.load(X + offs, mask=offs < n) * 2, mask=offs < n)

    x, out = np.arange(300, dtype=np.float32), np.zeros(300, np.float32)
    twice[lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)](x, out, 300)
    assert (out == 2 * x).all() and len(timed) == 2 and len(twice.configs_timings) == 6
    assert twice.best_config is configs[0]
    assert twice.configs_timings[configs[2]] == twice.configs_timings[configs[0]] != twice.configs_timings[configs[3]]


def test_autotune_with_no_runnable_configuration_names_each():
    @triton.autotune(configs=[triton.Config({"BLOCK": 1 << 17}), triton.Config({"BLOCK": 1 << 18})], key=[])
    @triton.jit
    def too_big(X, BLOCK: tl.constexpr):
        tl.store(X + tl.arange(0, BLOCK), 1.0)

    with pytest.raises(AutotuneError, match="no configuration could run") as e:
        too_big[(1,)](np.zeros(4, np.float32))
    assert "131072" in str(e.value) and "262144" in str(e.value)
    with pytest.raises(AutotuneError, match="key names"):
        triton.autotune(configs=[], key=["nope"])(scale)


def test_heuristics_under_autotune():
    @triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"], rep=1,
                     warmup=1, restore_value=["X"])
    @triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
    @triton.jit
    def double(X, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        if EVEN:
            tl.store(X + offs, tl.load(X + offs) * 2)
        else:
            tl.store(X + offs, tl.load(X + offs, mask=offs < n) * 2, mask=offs < n)

    x = np.arange(300, dtype=np.float32)
    double[lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)](x, 300)
    assert (x == 2 * np.arange(300)).all()      # restored after tuning, doubled once


def test_host_functions_version_and_driver():
    assert triton.__version__ == "3.4.0"
    assert triton.cdiv(10, 4) == 3 and triton.next_power_of_2(1000) == 1024 and triton.next_power_of_2(0) == 0
    d = triton.runtime.driver.active
    assert d.get_current_device() == 0 and d.get_current_stream() == 0
    assert d.get_active_torch_device() == torch.device("cpu")
    target = d.get_current_target()
    assert target.backend == "metal" and target.warp_size == 32
    props = d.utils.get_device_properties(0)
    assert props["max_shared_mem"] == 32768 and props["warpSize"] == 32 and props["multiprocessor_count"] >= 1
    d.get_device_interface().synchronize()
    assert d.get_benchmarker() is triton.testing.do_bench
    from types import SimpleNamespace

    from metile.triton.runtime.driver import _cores
    assert _cores(SimpleNamespace(gpu_name="Apple M1 Max")) == 32       # an Apple GPU's cores, from metile's table
    assert _cores(SimpleNamespace(gpu_name="Apple M99")) == props["multiprocessor_count"]


def test_testing_utilities(capsys, tmp_path):
    x = torch.ones(1000)
    assert triton.testing.do_bench(lambda: x + 1, warmup=1, rep=2) > 0
    low, mid, high = triton.testing.do_bench(lambda: x + 1, warmup=1, rep=2, quantiles=[0.2, 0.5, 0.8])
    assert low <= mid <= high
    triton.testing.assert_close(x, x + 0.005)
    with pytest.raises(AssertionError):
        triton.testing.assert_close(x, x + 0.5)

    @triton.testing.perf_report(triton.testing.Benchmark(
        x_names=["size"], x_vals=[2, 4], line_arg="provider", line_vals=["a", "b"], line_names=["A", "B"],
        plot_name="demo", args={"scale": 10}))
    def bench(size, provider, scale):
        return (size * scale, size, size * 100) if provider == "a" else size

    rows = bench.run(print_data=True, save_path=str(tmp_path), return_df=True)
    printed = capsys.readouterr().out
    assert "demo:" in printed and "40" in printed
    assert (tmp_path / "demo.csv").read_text().splitlines()[0] == "size,A,B"
    values = rows.to_dict("records") if hasattr(rows, "to_dict") else rows
    assert [r["A"] for r in values] == [20, 40]
