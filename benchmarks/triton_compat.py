"""Liger-Kernel's Triton ops four ways on the CPU, side by side: through metile.triton on metile's CPU device (as it
runs by default: tensors copied into guarded memory, those of a launch with a tensor of 1 MiB or more bound in place
in the kernel's checked build), the same with every tensor bound in place in the plain build
(METILE_CPU_IN_PLACE=1: no copies and no checks, so an access past an array goes uncaught, as on a GPU), in
Triton's own interpreter (TRITON_INTERPRET=1, the Triton wheel, no metile) and as torch's eager operations.

For each op that runs on metile (tests/test_liger_ops.py), one forward and backward at a moderate shape, fp32:
- first call: the first forward and backward in a fresh process; on metile it compiles every kernel the op
  launches (trace, passes, MSL, the CPU device's C++ build) with an empty kernel cache (the CPU device's runtime
  library and headers are built beforehand, once); "compile" is the first call less the steady-state time
  ("none" for an op whose kernels an earlier op of the same process compiled: fused_linear_jsd's JSD kernel, jsd's);
- steady: the median of later calls (at least 3, and more within about a second);
- kernels: the part of each call spent inside Triton kernel launches (`kernel[grid](...)`, outermost only: on metile
  the binding, the copies into and out of the CPU device's guarded memory and the dispatch; in the interpreter its
  copies of the tensors and the interpreted program), its median over the steady calls. The rest is the op's host
  code (Liger's torch operations, autograd), the same on both sides;
- bound: the interpreter's whole call over metile's host code alone (steady less kernels), the end-to-end speed-up
  metile would show if its kernels took no time. An op whose host code is a large part of the call (Liger's fused
  linear losses, whose chunked matrix products are torch's) cannot be much faster end to end however fast its
  kernels are; its kernels column is what compares the two ways;
- CPU time: steady and kernels again, as the CPU time of the way's process (every thread's: on metile the CPU
  device's workers' too) instead of wall time. On a machine shared with other work a process waits for cores, and
  wall time counts the waits: metile's calls of a few milliseconds, which hand work between threads (the CPU
  device's workers, torch's), wait more often, relative to their length, than the interpreter's single thread (on a
  2-core machine at a load average of 9 to 10, the median wall time of Liger's embedding on metile was 7.7 ms in one
  run and 21 ms in another a few minutes later, with 8.5 ms of CPU time). CPU time counts work, not waits;
- compile per kernel (metile): the time of each specialization's compile in the first call (trace, passes, MSL, the
  C++ build), its median and maximum per op and over every op.
The four ways run in four processes at once, taking turns op by op (metile, metile in place, the interpreter, torch
for one op, then the next op), so that the figures of one op are taken within seconds of each other: on a machine
shared with other work, a load that comes and goes then moves the four alike instead of one way's whole run.
Each way's process first runs torch's autograd once and (Triton ways) imports Liger and
launches a small kernel of its own, so that an op's first call does not pay the process's own start. The tables
print medians in milliseconds and the speed-ups interpreter / metile and torch / metile (above 1: metile is faster);
the interpreter's cells are empty for ops it cannot run (the reason is printed below); "load" is the machine's
load average when metile's turn at the op began. Figures of a shared 2-core machine vary by some 10-20 %.

Every way's process runs with OMP_WAIT_POLICY=PASSIVE (unless the environment sets it): torch's OpenMP threads (GNU
libgomp in torch's wheels) otherwise spin for a while after each parallel region of the torch operations in the host
code (Liger's `torch.zeros_like` of a gradient, say) and, on a machine with other load, take the cores from what runs
next (the CPU device's workers, Triton's interpreter) and from each other: on a 2-core machine at a load average of
10, Liger's embedding forward and backward took a median 45 ms on metile with torch's default and 10 ms with it. The
setting is the same for the four ways, so that the ratios compare the kernels.

Run: python benchmarks/triton_compat.py [--ops rms_norm,swiglu] [--budget 1.0]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WAYS = ("metile", "metile-in-place", "interpreter", "torch")


def _ops():
    """name -> (make inputs, Liger's call, torch's eager call); the calls return the tensors to differentiate."""
    import torch
    import torch.nn.functional as F

    def lx(name):
        import importlib

        return importlib.import_module(f"liger_kernel.ops.{name}")

    def rand(*shape, grad=True, scale=1.0):
        t = torch.randn(*shape) * scale
        return t.requires_grad_(grad)

    def logp(rows, vocab, grad=True):
        return torch.randn(rows, vocab).log_softmax(-1).requires_grad_(grad)

    def rms(x, w, eps=1e-6):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rotate_half(x):
        a, b = x.chunk(2, -1)
        return torch.cat((-b, a), -1)

    def rope_inputs():
        angle = torch.arange(128)[:, None] * torch.rand(32)
        angle = torch.cat((angle, angle), -1)[None]
        return rand(2, 8, 128, 64), rand(2, 4, 128, 64), angle.cos(), angle.sin()

    def mrope_inputs():
        angle = torch.randint(0, 512, (3, 2, 128, 1)).float() * torch.rand(32)
        angle = torch.cat((angle, angle), -1)
        return rand(2, 8, 128, 64), rand(2, 4, 128, 64), angle.cos(), angle.sin()

    def mrope_torch(q, k, cos, sin):
        parts = [8, 12, 12] * 2
        c = torch.cat([m[i % 3] for i, m in enumerate(cos.split(parts, -1))], -1)[:, None]
        s = torch.cat([m[i % 3] for i, m in enumerate(sin.split(parts, -1))], -1)[:, None]
        return q * c + rotate_half(q) * s, k * c + rotate_half(k) * s

    def jsd_torch(log_q, log_p, beta=0.5):
        p, q = log_p.exp(), log_q.exp()
        log_m = torch.log(beta * p + (1 - beta) * q)
        return (beta * (p * (log_p - log_m)).sum(-1) + (1 - beta) * (q * (log_q - log_m)).sum(-1)).mean()

    def sparsemax_torch(x):
        z, _ = torch.sort(x, -1, descending=True)
        k = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype)
        cum = z.cumsum(-1)
        kmax = ((1 + k * z) > cum).sum(-1, keepdim=True)
        return torch.clamp(x - (cum.gather(-1, kmax - 1) - 1) / kmax, min=0)

    def mta_torch(s, w, b):
        future = torch.ones(s.shape[-1], s.shape[-1], dtype=torch.bool).triu(1)
        out = F.conv2d(torch.softmax(s.masked_fill(future, float("-inf")), -1), w, b, padding=1)
        return out.masked_fill(future, 0.0)

    def na_torch(q, k, v, size=7):
        i, j = torch.arange(q.shape[-2])[:, None], torch.arange(q.shape[-2])[None, :]
        s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
        return torch.softmax(s.masked_fill((j - i).abs() > size // 2, float("-inf")), -1) @ v

    h = 512
    return {
        "rms_norm": (lambda: (rand(4, 128, h), rand(h)),
                     lambda x, w: lx("rms_norm").LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "llama", False),
                     rms),
        "fused_add_rms_norm": (lambda: (rand(4, 128, h), rand(4, 128, h), rand(h)),
                               lambda x, r, w: lx("fused_add_rms_norm").LigerFusedAddRMSNormFunction.apply(
                                   x, r, w, 1e-6, 0.0, "llama", False)[0],
                               lambda x, r, w: rms(x + r, w)),
        "layer_norm": (lambda: (rand(4, 128, h), rand(h), rand(h)),
                       lambda x, w, b: lx("layer_norm").LigerLayerNormFunction.apply(x, w, b, 1e-6),
                       lambda x, w, b: F.layer_norm(x, (h,), w, b, 1e-6)),
        "group_norm": (lambda: (rand(4, 32, h), rand(32), rand(32)),
                       lambda x, w, b: lx("group_norm").LigerGroupNormFunction.apply(x, w, b, 32, 8, 1e-6),
                       lambda x, w, b: F.group_norm(x, 8, w, b, 1e-6)),
        "poly_norm": (lambda: (rand(4, 128, h), rand(3), rand(())),
                      lambda x, w, b: lx("poly_norm").LigerPolyNormFunction.apply(x, w, b, 1e-6, False),
                      lambda x, w, b: sum(w[i] * rms(x ** (3 - i), 1.0) for i in range(3)) + b),
        "dyt (forward)": (lambda: (rand(4, 128, h, grad=False), torch.tensor([0.5]), torch.randn(h), torch.randn(h)),
                          lambda x, a, g, b: lx("dyt").LigerDyTFunction.apply(x, a, g, b),
                          lambda x, a, g, b: g * torch.tanh(a * x) + b),
        "swiglu": (lambda: (rand(4, 128, 4 * h), rand(4, 128, 4 * h)),
                   lambda a, b: lx("swiglu").LigerSiLUMulFunction.apply(a, b),
                   lambda a, b: F.silu(a) * b),
        "geglu": (lambda: (rand(4, 128, 4 * h), rand(4, 128, 4 * h)),
                  lambda a, b: lx("geglu").LigerGELUMulFunction.apply(a, b),
                  lambda a, b: F.gelu(a, approximate="tanh") * b),
        "relu_squared": (lambda: (rand(4, 128, 4 * h),),
                         lambda x: lx("relu_squared").LigerReLUSquaredFunction.apply(x),
                         lambda x: F.relu(x).square()),
        "softmax": (lambda: (rand(512, 1024),),
                    lambda x: lx("softmax").LigerSoftmaxFunction.apply(x),
                    lambda x: torch.softmax(x, -1)),
        "sparsemax": (lambda: (rand(256, 1024),),
                      lambda x: lx("sparsemax").LigerSparsemaxFunction.apply(x, -1),
                      sparsemax_torch),
        "rope": (rope_inputs,
                 lambda q, k, c, s: lx("rope").LigerRopeFunction.apply(q, k, c, s),
                 lambda q, k, c, s: (q * c[:, None] + rotate_half(q) * s[:, None],
                                     k * c[:, None] + rotate_half(k) * s[:, None])),
        "qwen2vl_mrope": (mrope_inputs,
                          lambda q, k, c, s: lx("qwen2vl_mrope").LigerQwen2VLMRopeFunction.apply(q, k, c, s,
                                                                                               [8, 12, 12]),
                          mrope_torch),
        "kl_div": (lambda: (logp(256, 4096), torch.randn(256, 4096).softmax(-1)),
                   lambda x, t: lx("kl_div").LigerKLDivLossFunction.apply(x, t, "batchmean", False, 1e-10),
                   lambda x, t: F.kl_div(x, t, reduction="batchmean")),
        "jsd": (lambda: (logp(256, 4096), logp(256, 4096, grad=False)),
                lambda x, t: lx("jsd").LigerJSDFunction.apply(x, t, None, 0.5, -100, None, None),
                jsd_torch),
        "fused_linear_jsd": (lambda: (rand(256, 256), rand(4096, 256, scale=0.1), torch.randn(256, 256),
                                      torch.randn(4096, 256) * 0.1),
                             lambda x, w, tx, tw: lx("fused_linear_jsd").LigerFusedLinearJSDFunction.apply(
                                 x, w, tx, tw, None, 0.5, -100, 1.0, None, None, None),
                             lambda x, w, tx, tw: jsd_torch((x @ w.T).log_softmax(-1), (tx @ tw.T).log_softmax(-1))),
        "tvd": (lambda: (torch.randn(256, 4096).softmax(-1).requires_grad_(True), torch.randn(256, 4096).softmax(-1)),
                lambda p, q: lx("tvd").LigerTVDLossFunction.apply(p, q, None, "batchmean"),
                lambda p, q: 0.5 * (p - q).abs().sum() / p.shape[0]),
        "embedding": (lambda: (rand(8192, 256), torch.randint(0, 8192, (4, 128))),
                      lambda e, i: __import__("liger_kernel.ops.experimental.embedding", fromlist=["x"])
                      .LigerEmbeddingFunction.apply(e, i),
                      lambda e, i: F.embedding(i, e)),
        "multi_token_attention": (lambda: (rand(2, 4, 64, 64), rand(4, 4, 3, 3, scale=0.3), rand(4)),
                                  lambda s, w, b: lx("multi_token_attention").LigerMultiTokenAttentionFunction.apply(
                                      s, w, b, 1, 1),
                                  mta_torch),
        "fused_neighborhood_attention": (lambda: (rand(2, 4, 64, 32), rand(2, 4, 64, 32), rand(2, 4, 64, 32)),
                                         lambda q, k, v: lx("fused_neighborhood_attention")
                                         .LigerFusedNeighborhoodAttentionFunction.apply(q, k, v, 7, 1, None),
                                         na_torch),
    }


class _Clock:
    """Time spent inside Triton kernel launches (`kernel[grid](...)`, an autotuner's or heuristics' launch included),
    outermost launch only: metile.triton's `JITFunction.run` (binding, copies to and from the CPU device's guarded
    memory, the dispatch) or the interpreter's `InterpretedFunction.run` (its copies of the tensors and the
    interpreted program); and, on metile, the time of each compile (`Launcher._launch`: trace, passes, MSL, and the
    C++ build its first dispatch makes) by kernel name."""

    def __init__(self):
        self.kernels = 0.0
        self.kernels_cpu = 0.0
        self.depth = 0
        self.compiles: list[tuple[str, float]] = []
        self.compiling = 0
        self.record_of: dict[int, int] = {}   # id of a compiled kernel's CPU library -> its index in `compiles`

    def wrap_run(self, cls) -> None:
        run = cls.run

        def timed(fn_self, *args, **kwargs):
            if self.depth:
                return run(fn_self, *args, **kwargs)
            self.depth += 1
            start, cpu = time.perf_counter(), time.process_time()
            try:
                return run(fn_self, *args, **kwargs)
            finally:
                self.kernels += time.perf_counter() - start
                self.kernels_cpu += time.process_time() - cpu
                self.depth -= 1

        cls.run = timed

    def wrap_compile(self, cls) -> None:
        """Time `cls._trace` and `cls._compile` (metile's `JITKernel`), counting only the calls that trace or compile
        a new specialization: each compile is recorded with the trace of its kernel just before it."""
        trace, compile_ = cls._trace, cls._compile
        pending: dict[int, float] = {}

        def timed_trace(kernel, spec, *args, **kwargs):
            new = spec[0] not in kernel._cache
            start = time.perf_counter()
            try:
                return trace(kernel, spec, *args, **kwargs)
            finally:
                if new:
                    pending[id(kernel)] = pending.get(id(kernel), 0.0) + time.perf_counter() - start

        def timed_compile(kernel, *args, **kwargs):
            before = len(kernel._compiled)
            start = time.perf_counter()
            self.compiling += 1
            compiled = None
            try:
                compiled = compile_(kernel, *args, **kwargs)
                return compiled
            finally:
                self.compiling -= 1
                if len(kernel._compiled) > before:
                    took = time.perf_counter() - start + pending.pop(id(kernel), 0.0)
                    library = getattr(getattr(compiled, "function", None), "library", None)
                    if library is not None:
                        self.record_of[id(library)] = len(self.compiles)
                    self.compiles.append((kernel.fn.__name__, took))

        cls._trace, cls._compile = timed_trace, timed_compile

    def wrap_build(self, cls) -> None:
        """Add to a kernel's compile the C++ builds of its library (`cls.handle`, the CPU device's `CpuLibrary`)
        that its first launch makes after `_compile` (a launch leaves the build to its dispatch, which makes the
        build it runs)."""
        handle = cls.handle

        def timed_handle(library, sanitize, checked=False):
            at = self.record_of.get(id(library)) if not self.compiling else None
            start = time.perf_counter()
            try:
                return handle(library, sanitize, checked)
            finally:
                if at is not None:
                    name, took = self.compiles[at]
                    self.compiles[at] = (name, took + time.perf_counter() - start)

        cls.handle = timed_handle


CLOCK = _Clock()


def _step(fn, inputs) -> tuple[float, float, float, float]:
    """One forward and backward (a forward alone when nothing needs a gradient): its wall time in seconds and the part
    of it spent inside Triton kernel launches (`CLOCK`), then the same two as the CPU time of the process (every
    thread's)."""
    import torch

    for t in inputs:
        if isinstance(t, torch.Tensor):
            t.grad = None
    CLOCK.kernels = CLOCK.kernels_cpu = 0.0
    start, cpu = time.perf_counter(), time.process_time()
    out = fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    if any(o.requires_grad for o in outs):
        torch.autograd.backward([o for o in outs if o.requires_grad],
                                [torch.ones_like(o) for o in outs if o.requires_grad])
    return time.perf_counter() - start, CLOCK.kernels, time.process_time() - cpu, CLOCK.kernels_cpu


def _warm_up(way: str) -> None:
    """What every op's first call would otherwise pay once per process: torch's first autograd pass and, for the
    Triton ways, importing Liger and the compiler (or interpreter) and a first launch, of a kernel of no op's."""
    import torch

    big = torch.randn(1 << 20, requires_grad=True)   # large enough to start torch's intra-op threads
    (big * 2).exp().sum().backward()
    x = torch.ones(8, requires_grad=True)
    if way == "torch":
        return
    import liger_kernel.ops  # noqa: F401 - Liger's modules (and torch._dynamo, which they import), outside the timings
    import triton
    import triton.language as tl

    @triton.jit
    def scale(X, Y, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(Y + offs, tl.load(X + offs, mask=offs < n) * 2, mask=offs < n)

    scale[(1,)](x.detach(), torch.empty(8), 8, BLOCK=8)


def _install_clock(way: str) -> None:
    if way.startswith("metile"):
        import importlib

        # the modules (`metile.kernel` and `metile.triton.jit` are also the names of functions)
        CLOCK.wrap_run(importlib.import_module("metile.triton.jit").JITFunction)
        CLOCK.wrap_compile(importlib.import_module("metile.kernel").JITKernel)
        CLOCK.wrap_build(importlib.import_module("metile.metal.cpu.device").CpuLibrary)
    elif way == "interpreter":
        import triton.runtime.interpreter

        CLOCK.wrap_run(triton.runtime.interpreter.InterpretedFunction)


def measure(way: str, budget: float) -> None:
    """In this process (set up for `way`), time each op named on a line of stdin and print one JSON line for it."""
    if way.startswith("metile"):
        import metile.triton

        metile.triton.install()
    import torch

    _install_clock(way)
    _warm_up(way)
    ops = _ops()
    print(json.dumps({"ready": way}), flush=True)
    for line in sys.stdin:
        name = line.strip()
        make, liger_call, torch_call = ops[name]
        torch.manual_seed(0)
        inputs = make()
        fn = torch_call if way == "torch" else liger_call
        row = {"op": name, "load": os.getloadavg()[0]}
        try:
            CLOCK.compiles.clear()
            CLOCK.record_of.clear()
            row["first"], row["first_kernels"], _, _ = _step(fn, inputs)
            row["compiles"] = list(CLOCK.compiles)
            times, spent = [], 0.0
            while len(times) < 3 or (spent < budget and len(times) < 200):
                times.append(_step(fn, inputs))
                spent += times[-1][0]
            for k, key in enumerate(("steady", "kernels", "cpu", "kernels_cpu")):
                row[key] = statistics.median(t[k] for t in times)
            row["reps"] = len(times)
        except Exception as e:   # a way that cannot run an op: its cell stays empty
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        del inputs
        print(json.dumps(row), flush=True)


def start_way(way: str, cache: str, budget: float) -> subprocess.Popen:
    """The process of `way`, warmed up and waiting for op names on its stdin."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # see the module docstring
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if way.startswith("metile"):
        env.update(METILE_DEVICE="cpu", METILE_CACHE_DIR=os.path.join(cache, way))
        if way == "metile-in-place":
            env["METILE_CPU_IN_PLACE"] = "1"
        # the CPU device's runtime library and headers once, so that first calls measure the kernels' compiles
        subprocess.run([sys.executable, "-c", "import metile; metile.device('cpu')"], env=env, check=True)
    elif way == "interpreter":
        env["TRITON_INTERPRET"] = "1"
    proc = subprocess.Popen([sys.executable, __file__, "--way", way, "--budget", str(budget)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    _row(proc, way)   # ready
    return proc


def _row(proc: subprocess.Popen, way: str) -> dict:
    """The next JSON line `proc` prints (its other lines skipped)."""
    for line in proc.stdout:
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit(f"the {way} process ended (exit status {proc.wait()}); its error is above")


def run_ways(names: list[str], cache: str, budget: float) -> dict[str, dict[str, dict]]:
    """Each op measured by the four ways in turn (see the module docstring)."""
    procs = {way: start_way(way, cache, budget) for way in WAYS}
    results: dict[str, dict[str, dict]] = {way: {} for way in WAYS}
    try:
        for name in names:
            for way, proc in procs.items():
                proc.stdin.write(name + "\n")
                proc.stdin.flush()
                results[way][name] = _row(proc, way)
            print(f"measured {name}", file=sys.stderr, flush=True)
    finally:
        for proc in procs.values():
            proc.stdin.close()
            proc.wait()
    return results


def _ms(row: dict | None, key: str) -> str:
    return f"{1e3 * row[key]:9.2f}" if row and key in row else f"{'-':>9}"


def _ratio(a: dict | None, b: dict | None, key: str) -> str:
    return f"{a[key] / b[key]:8.2f}x" if a and b and key in a and key in b else f"{'-':>9}"


def _host_bound(ir: dict | None, mr: dict | None, whole: str, kernels: str) -> str:
    """The end-to-end interp/metile ratio metile would reach with kernels that took no time: the interpreter's whole
    call against metile's host code alone (the op's torch operations and autograd, which both ways run)."""
    if not (ir and mr and whole in ir and whole in mr and kernels in mr) or mr[whole] <= mr[kernels]:
        return f"{'-':>9}"
    return f"{ir[whole] / (mr[whole] - mr[kernels]):8.1f}x"


def _steady_table(names, m, i, t, whole: str, kernels: str, *, load: bool) -> None:
    """One table of steady-state medians per op: `whole` (end to end) and `kernels` (inside launches), metile (`m`)
    against the interpreter (`i`) and torch (`t`), the bound of interp/m end to end set by the host code, and
    metile's load average when `load`."""
    print(f"{'op':30} {'metile':>9} {'interp':>9} {'torch':>9} {'interp/m':>9} {'torch/m':>9} "
          f"{'m kernels':>9} {'i kernels':>9} {'interp/m':>9} {'bound':>9}" + (f" {'load':>5}" if load else ""))
    for n in names:
        mr, ir = m.get(n), i.get(n)
        print(f"{n:30} {_ms(mr, whole)} {_ms(ir, whole)} {_ms(t.get(n), whole)} "
              f"{_ratio(ir, mr, whole)} {_ratio(t.get(n), mr, whole)} "
              f"{_ms(mr, kernels)} {_ms(ir, kernels)} {_ratio(ir, mr, kernels)} {_host_bound(ir, mr, whole, kernels)}"
              + (f" {(mr or {}).get('load', float('nan')):5.1f}" if load else ""))


def report(results: dict[str, dict[str, dict]], names: list[str]) -> None:
    m, ip, i, t = (results[w] for w in WAYS)
    print("\nfirst call (ms): one forward and backward in a fresh process; metile compiles every kernel of the op")
    print(f"{'op':30} {'metile':>9} {'compile':>9} {'interp':>9} {'torch':>9} {'interp/m':>9} {'torch/m':>9}")
    for n in names:
        mr = m.get(n)
        if not mr or "steady" not in mr:
            comp = f"{'-':>9}"
        elif not mr.get("compiles"):   # an earlier op of the process compiled its kernels
            comp = f"{'none':>9}"
        else:
            comp = f"{1e3 * (mr['first'] - mr['steady']):9.2f}"
        print(f"{n:30} {_ms(mr, 'first')} {comp} {_ms(i.get(n), 'first')} {_ms(t.get(n), 'first')} "
              f"{_ratio(i.get(n), mr, 'first')} {_ratio(t.get(n), mr, 'first')}")
    print("\nfirst compile per kernel on metile (ms): each specialization the op's first call compiles (trace, passes, "
          "MSL, C++ build)")
    print(f"{'op':30} {'kernels':>9} {'median':>9} {'max':>9}  slowest")
    every = []
    for n in names:
        compiles = (m.get(n) or {}).get("compiles") or []
        if not compiles:
            continue
        secs = [c for _, c in compiles]
        every += secs
        slowest = max(compiles, key=lambda c: c[1])[0]
        print(f"{n:30} {len(secs):9d} {1e3 * statistics.median(secs):9.1f} {1e3 * max(secs):9.1f}  {slowest}")
    if every:
        print(f"{'every kernel':30} {len(every):9d} {1e3 * statistics.median(every):9.1f} {1e3 * max(every):9.1f}")
    print("\nsteady state (ms): median of later forward and backward calls; end to end, and the part inside Triton "
          "kernel launches (kernels); bound: the end-to-end interp/m that kernels taking no time on metile would give "
          "(the interpreter's whole call over metile's host code, the op's torch operations that both ways run)")
    _steady_table(names, m, i, t, "steady", "kernels", load=True)
    print("\nsteady state, CPU time (ms): the same medians as the CPU time of each way's process (all its threads: on "
          "metile the CPU device's workers too) rather than wall time; on a machine with other work a way waits for "
          "cores, which wall time counts and CPU time does not")
    _steady_table(names, m, i, t, "cpu", "kernels_cpu", load=False)
    print("\nsteady state with arrays in place (ms): metile with METILE_CPU_IN_PLACE=1, which binds each tensor as its "
          "own memory in the kernel's plain build: no copies, no guard pages and no checks, so an access past an "
          "array is not caught (wall time, then CPU time)")
    print(f"{'op':30} {'in place':>9} {'kernels':>9} {'interp/ip':>9} {'kernels':>9} {'cpu':>9} {'kernels':>9} "
          f"{'interp/ip':>9} {'kernels':>9}")
    for n in names:
        pr, ir = ip.get(n), i.get(n)
        print(f"{n:30} {_ms(pr, 'steady')} {_ms(pr, 'kernels')} {_ratio(ir, pr, 'steady')} "
              f"{_ratio(ir, pr, 'kernels')} {_ms(pr, 'cpu')} {_ms(pr, 'kernels_cpu')} {_ratio(ir, pr, 'cpu')} "
              f"{_ratio(ir, pr, 'kernels_cpu')}")
    for way in WAYS:
        for n in names:
            if "error" in results[way].get(n, {}):
                print(f"{way} could not run {n}: {results[way][n]['error']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="", help="comma-separated op names (default: every op)")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds of steady-state calls per op and way")
    parser.add_argument("--way", choices=WAYS, help=argparse.SUPPRESS)   # the subprocess of one way
    args = parser.parse_args()
    if args.way:
        measure(args.way, args.budget)
        return
    import importlib.util

    if importlib.util.find_spec("liger_kernel") is None:
        raise SystemExit("liger-kernel is not installed (pip install 'metile[dev]')")
    names = args.ops.split(",") if args.ops else list(_ops())
    unknown = [n for n in names if n not in _ops()]
    if unknown:
        parser.error(f"unknown op {', '.join(map(repr, unknown))}: the ops are {', '.join(map(repr, _ops()))}")
    with tempfile.TemporaryDirectory() as cache:
        results = run_ways(names, cache, args.budget)
    report(results, names)


if __name__ == "__main__":
    main()
