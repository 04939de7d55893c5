"""`triton.testing` on metile: `do_bench` (metile's, with Triton's defaults), `do_bench_cudagraph`, `assert_close`,
and `perf_report`/`Benchmark` for benchmark tables.

- `do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean")` times `fn` on metile's
  default device (`metile.testing.do_bench`: GPU timestamps on an Apple GPU, wall time on the CPU device);
  `grad_to_none` tensors have their `.grad` cleared before each call. `do_bench_cudagraph` times the same way.
- `assert_close(x, y, atol=None, rtol=None, err_msg="")`: numpy's `assert_allclose` of the two (tensors, arrays or
  numbers), `atol` 1e-2 and `rtol` 0 by default, either may be a function of the dtype.
- `perf_report(benchmarks)(fn).run(show_plots=False, print_data=False, save_path="", return_df=False)` runs `fn` over
  each `Benchmark`'s x values and lines and prints or saves the table (CSV, with a PNG plot when matplotlib is
  installed). Without pandas, `return_df=True` returns the tables as lists of rows (dicts); without matplotlib,
  `show_plots` and the PNG are skipped with a note on stderr.
"""

from __future__ import annotations

import csv
import os
import sys

import numpy as np

from metile import testing as _metile_testing


def do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
    """Milliseconds per call of `fn` (Triton's `do_bench`; see the module docstring)."""
    call = fn
    if grad_to_none is not None:
        def call():
            for x in grad_to_none:
                x.grad = None
            fn()
    out = _metile_testing.do_bench(call, warmup=warmup, rep=rep, quantiles=quantiles, return_mode=return_mode)
    return out


def do_bench_cudagraph(fn, rep=20, grad_to_none=None, quantiles=None, return_mode="mean"):
    """As `do_bench` (metile's devices have no CUDA graphs): `rep` milliseconds of timed calls."""
    return do_bench(fn, warmup=0, rep=rep, grad_to_none=grad_to_none, quantiles=quantiles, return_mode=return_mode)


def _as_numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):   # a torch tensor
        x = x.detach().cpu()
        if str(x.dtype) == "torch.bfloat16":
            x = x.float()
        return x.numpy()
    return np.asarray(x)


def assert_close(x, y, atol=None, rtol=None, err_msg=""):
    """Assert `x` and `y` are close (see the module docstring)."""
    dtype = getattr(x, "dtype", None)
    atol = 1e-2 if atol is None else atol
    rtol = 0.0 if rtol is None else rtol
    atol = atol(dtype) if callable(atol) else atol
    rtol = rtol(dtype) if callable(rtol) else rtol
    a, b = _as_numpy(x), _as_numpy(y)
    if a.size > 1 or b.size > 1:
        np.testing.assert_allclose(a, b, atol=atol, rtol=rtol, equal_nan=True, err_msg=err_msg)
        return
    if not np.allclose(a, b, atol=atol, rtol=rtol):
        raise AssertionError(f"{err_msg} {a} is not close to {b} (atol={atol}, rtol={rtol})")


class Benchmark:
    """One table of a `perf_report`: `fn(**{x_name: x}, **{line_arg: line}, **args)` for every x and line."""

    def __init__(self, x_names, x_vals, line_arg, line_vals, line_names, plot_name, args, xlabel="", ylabel="",
                 x_log=False, y_log=False, styles=None):
        self.x_names, self.x_vals, self.x_log = list(x_names), list(x_vals), x_log
        self.line_arg, self.line_vals, self.line_names = line_arg, list(line_vals), list(line_names)
        self.y_log, self.styles, self.xlabel, self.ylabel = y_log, styles, xlabel, ylabel
        self.plot_name, self.args = plot_name, dict(args)


class Mark:
    """What `perf_report` returns: `run(...)` runs the benchmarks."""

    def __init__(self, fn, benchmarks):
        self.fn, self.benchmarks = fn, benchmarks

    def _rows(self, bench: Benchmark, **kwargs) -> list[dict]:
        rows = []
        for x in bench.x_vals:
            xs = list(x) if isinstance(x, (list, tuple)) else [x] * len(bench.x_names)
            if len(xs) != len(bench.x_names):
                raise ValueError(f"Expected {len(bench.x_names)} values, got {x}")
            row = dict(zip(bench.x_names, xs))
            for line, name in zip(bench.line_vals, bench.line_names):
                ret = self.fn(**dict(zip(bench.x_names, xs)), **{bench.line_arg: line}, **bench.args, **kwargs)
                mean, low, high = ret if isinstance(ret, (tuple, list)) else (ret, None, None)
                row[name], row[f"{name}-min"], row[f"{name}-max"] = mean, low, high
            rows.append(row)
        return rows

    def _run(self, bench: Benchmark, save_path: str, show_plots: bool, print_data: bool, diff_col=False,
             save_precision=6, **kwargs):
        rows = self._rows(bench, **kwargs)
        columns = [*bench.x_names, *bench.line_names]
        if diff_col and len(columns) == 2:
            for r in rows:
                r["Diff"] = r[columns[1]] - r[columns[0]]
            columns.append("Diff")
        if bench.plot_name and (show_plots or save_path):
            _plot(bench, rows, save_path, show_plots)
        if print_data:
            print(bench.plot_name + ":")
            print(_table(rows, columns))
        if save_path:
            os.makedirs(save_path, exist_ok=True)
            with open(os.path.join(save_path, f"{bench.plot_name}.csv"), "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(columns)
                for r in rows:
                    w.writerow([f"{r[c]:.{save_precision}f}" if isinstance(r[c], float) else r[c] for c in columns])
        return _frame(rows, columns)

    def run(self, show_plots=False, print_data=False, save_path="", return_df=False, **kwargs):
        single = isinstance(self.benchmarks, Benchmark)
        benchmarks = [self.benchmarks] if single else list(self.benchmarks)
        frames = [self._run(b, save_path, show_plots, print_data, **kwargs) for b in benchmarks]
        if save_path:
            with open(os.path.join(save_path, "results.html"), "w") as html:
                html.write("<html><body>\n")
                for b in benchmarks:
                    html.write(f'<image src="{b.plot_name}.png"/>\n')
                html.write("</body></html>\n")
        if return_df:
            return frames[0] if single else frames
        return None


def _table(rows: list[dict], columns: list[str]) -> str:
    cells = [[str(i)] + [_cell(r[c]) for c in columns] for i, r in enumerate(rows)]
    head = [""] + columns
    width = [max(len(x) for x in col) for col in zip(head, *cells)]
    return "\n".join(" ".join(x.rjust(w) for x, w in zip(line, width)) for line in [head, *cells])


def _cell(v) -> str:
    return f"{v:.6f}" if isinstance(v, float) else str(v)


def _frame(rows: list[dict], columns: list[str]):
    try:
        import pandas as pd
    except ImportError:
        return [{c: r[c] for c in columns} for r in rows]
    return pd.DataFrame([[r[c] for c in columns] for r in rows], columns=columns)


def _plot(bench: Benchmark, rows: list[dict], save_path: str, show: bool) -> None:
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"triton.testing: matplotlib is not installed; the plot {bench.plot_name!r} is skipped",
              file=sys.stderr)
        return
    plt.figure()
    ax = plt.subplot()
    first = bench.x_names[0]
    for i, name in enumerate(bench.line_names):
        color, style = (bench.styles[i] if bench.styles else (None, None))
        ax.plot([r[first] for r in rows], [r[name] for r in rows], label=name, color=color, ls=style)
    ax.legend()
    ax.set_xlabel(bench.xlabel or first)
    ax.set_ylabel(bench.ylabel)
    ax.set_xscale("log" if bench.x_log else "linear")
    ax.set_yscale("log" if bench.y_log else "linear")
    if show:
        plt.show()
    if save_path:
        os.makedirs(save_path, exist_ok=True)
        plt.savefig(os.path.join(save_path, f"{bench.plot_name}.png"))


def perf_report(benchmarks):
    """Mark `fn` for benchmarking over `benchmarks` (a `Benchmark` or a list of them)."""
    return lambda fn: Mark(fn, benchmarks)


__all__ = ["Benchmark", "Mark", "assert_close", "do_bench", "do_bench_cudagraph", "perf_report"]
