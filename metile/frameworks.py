"""metile kernels as operations of MLX graphs (`mlx_kernel`, on `mx.fast.metal_kernel`) and of torch programs on the
`mps` device (`torch_kernel`, on `torch.mps.compile_shader`), so that they run on those libraries' own GPU streams.

Both start from the MSL metile emits for the arguments' types and constexprs and its signature (`KernelSource`, from
the kernel's `MslArtifact`):
- MLX writes a kernel's signature itself from the names of its inputs and outputs, and takes only the body and a
  header (`mx.fast.metal_kernel(name, input_names, output_names, source, header)`): inputs `const device T* name`
  (`const constant T& name` for a 0-d array, `const constant T* name` for fewer than 8 elements), outputs
  `device T* name`, then each thread-position attribute the body names, typed as in its table (`MLX_ATTRIBUTES`).
  The body and header are cut out of metile's kernel, whose signature has the same form, and checked against what
  MLX will write: a kernel that writes a parameter that is not an output, an input of fewer than 8 elements, or a
  position attribute MLX types otherwise is refused. MLX makes the outputs (`output_shapes`, `output_dtypes`,
  `init_value`); the grid counts programs, as `kernel[grid]` does, and becomes MLX's grid of threads.
- torch's `compile_shader` takes the whole source, and its kernels take tensors and numbers in buffer order with a
  number of threads and a threadgroup size (`lib.name(*args, threads=..., group_size=..., arg_casts=...)`). torch
  binds a Python int as an int64 and a float as a float32: each number goes as a Python int or float, with the
  `arg_casts` entry that binds it as its parameter's type (`fp16` for `half`, `int32` for `int`, ...).
"""

from __future__ import annotations

import hashlib

import attrs
import numpy as np

from metile.emit.artifact import emit_artifact
from metile.emit.signature import ParamKind
from metile.frontend.errors import KernelArgumentError
from metile.ir.errors import MetileError
from metile.launch import ArrayTooLongError, array_elements, normalize_grid

MLX_ATTRIBUTES = {   # mx.fast.metal_kernel's thread-position attributes and the types it declares them with
    "dispatch_quadgroups_per_threadgroup": "uint", "dispatch_simdgroups_per_threadgroup": "uint",
    "dispatch_threads_per_threadgroup": "uint3", "grid_origin": "uint3", "grid_size": "uint3",
    "quadgroup_index_in_threadgroup": "uint", "quadgroups_per_threadgroup": "uint",
    "simdgroup_index_in_threadgroup": "uint", "simdgroups_per_threadgroup": "uint", "thread_execution_width": "uint",
    "thread_index_in_quadgroup": "uint", "thread_index_in_simdgroup": "uint", "thread_index_in_threadgroup": "uint",
    "thread_position_in_grid": "uint3", "thread_position_in_threadgroup": "uint3",
    "threadgroup_position_in_grid": "uint3", "threadgroups_per_grid": "uint3", "threads_per_grid": "uint3",
    "threads_per_simdgroup": "uint", "threads_per_threadgroup": "uint3",
}
MLX_CONSTANT_ELEMENTS = 8   # inputs with fewer elements are passed in MLX's `constant` address space


class FrameworkError(MetileError):
    """A metile kernel that cannot run as an MLX or torch operation as asked, or the library missing."""


@attrs.frozen
class Param:
    name: str          # the C name in the MSL (the Python name, unless it had to change)
    text: str          # its declaration
    attribute: str     # "buffer(i)", or a thread-position attribute
    written: bool


@attrs.frozen
class KernelSource:
    """A kernel's MSL for some argument types and constexprs, cut into what MLX and torch take."""

    msl: str
    entry: str
    header: str          # everything before the kernel function
    body: str            # the kernel function's body
    params: tuple[Param, ...]
    threads: int         # per threadgroup (one program)
    lengths: tuple[tuple[int, int], ...] = ()   # per hidden length parameter: its array's index and itemsize

    @property
    def buffers(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.attribute.startswith("buffer("))


def kernel_source(kernel, args: tuple, constexprs: dict) -> KernelSource:
    """Lower `kernel` for these arguments and emit it (no device compile), its MSL cut into header, body and
    parameters as its `MslArtifact`'s signature gives them (the kernel function starts at the signature's line,
    each parameter on a line of its own, and the body follows the last up to the closing brace)."""
    metal_ir = kernel.lower(*args, **constexprs)
    artifact = emit_artifact(metal_ir)
    sig = artifact.signature
    params = tuple(Param(p.name, p.declaration, f"buffer({p.index})" if p.kind is ParamKind.BUFFER else p.attribute,
                         p.kind is ParamKind.BUFFER and not p.is_reference and not p.is_const) for p in sig.params)
    lines = artifact.msl.splitlines(keepends=True)
    first = sig.line - 1 + max(len(sig.params), 1)   # the index of the body's first line
    header, body = "".join(lines[:sig.line - 1]), "\n" + "".join(lines[first:-1])
    ps = metal_ir.params
    lengths = tuple((p.length_of, ps[p.length_of].type.dtype.itemsize) for p in ps if p.length_of is not None)
    return KernelSource(artifact.msl, artifact.entry, header, body, params, artifact.threads, lengths)


def _grid(grid, meta: dict) -> tuple[int, int, int]:
    dims = normalize_grid(grid(meta) if callable(grid) else grid)
    return dims + (1,) * (3 - len(dims))


class MLXKernel:
    """A metile kernel as an MLX operation (see the module docstring): `op(*inputs, grid=..., output_shapes=[...],
    output_dtypes=[...], init_value=None, **constexprs)` returns the output arrays, computed on MLX's stream."""

    def __init__(self, kernel, outputs):
        self.kernel = kernel
        self.outputs = (outputs,) if isinstance(outputs, str) else tuple(outputs)
        specs = kernel.source.specs
        runtime = [s.name for s in specs if not s.constexpr]
        unknown = [o for o in self.outputs if o not in runtime]
        if not self.outputs or unknown:
            raise FrameworkError(f"mlx_kernel({kernel.fn.__name__}): outputs names the kernel's array parameters "
                                 f"it writes ({', '.join(runtime)}), not {', '.join(unknown) or 'nothing'}")
        self.inputs = tuple(n for n in runtime if n not in self.outputs)

    def __call__(self, *inputs, grid, output_shapes, output_dtypes, init_value=None, **constexprs):
        mx = _mlx()
        name = self.kernel.fn.__name__
        if len(inputs) != len(self.inputs):
            raise KernelArgumentError(f"{name} as an MLX operation takes its inputs {', '.join(self.inputs)}, "
                                      f"got {len(inputs)} argument(s)")
        if len(output_shapes) != len(self.outputs) or len(output_dtypes) != len(self.outputs):
            raise KernelArgumentError(f"{name}: one output shape and dtype for each of {', '.join(self.outputs)}")
        given = dict(zip(self.inputs, inputs))
        placeholders = {o: np.empty(0, _numpy_dtype(d)) for o, d in zip(self.outputs, output_dtypes)}
        ordered = [given[n] if n in given else placeholders[n] for n in (*self.inputs, *self.outputs)]
        runtime = [s.name for s in self.kernel.source.specs if not s.constexpr]
        args = [dict(zip((*self.inputs, *self.outputs), ordered))[n] for n in runtime]
        src = kernel_source(self.kernel, tuple(args), constexprs)
        if src.lengths:
            raise FrameworkError(f"{name} has a tile_load or tile_store without bounds=, which clips its tile to the "
                                 "length of its array, a number MLX does not pass to a kernel: give it bounds=")
        c_names = {p.name: p for p in src.buffers}
        for p in src.buffers:
            if p.written and p.name not in self.outputs:
                raise FrameworkError(f"{name} writes `{p.name}`, which is not one of its outputs "
                                     f"({', '.join(self.outputs)}): MLX passes inputs as const arrays")
        for p in src.params:
            if not p.attribute.startswith("buffer(") and MLX_ATTRIBUTES.get(p.name) != p.text.split()[0]:
                raise FrameworkError(f"{name} reads the position attribute `{p.name}`, which MLX does not declare as "
                                     f"metile does ({p.text})")
        arrays = []
        for n, v in zip(self.inputs, inputs):
            if not isinstance(v, mx.array):
                v = mx.array(v, dtype=_mlx_scalar(mx, c_names[n].text))
            if v.ndim > 0 and v.size < MLX_CONSTANT_ELEMENTS:
                raise FrameworkError(f"{name}: input `{n}` has {v.size} element(s); MLX passes arrays of fewer than "
                                     f"{MLX_CONSTANT_ELEMENTS} in its constant address space, which metile's kernel "
                                     "does not read: pad it")
            arrays.append(v)
        meta = {**dict(zip(self.inputs, inputs)), **constexprs}
        gx, gy, gz = _grid(grid, meta)
        digest = hashlib.sha256(src.msl.encode()).hexdigest()[:12]
        op = mx.fast.metal_kernel(name=f"metile_{name}_{digest}", input_names=list(self.inputs),
                                  output_names=list(self.outputs), source=src.body, header=src.header)
        return op(inputs=arrays, grid=(gx * src.threads, gy, gz), threadgroup=(src.threads, 1, 1),
                  output_shapes=list(output_shapes), output_dtypes=list(output_dtypes), init_value=init_value)


def mlx_kernel(kernel, outputs) -> MLXKernel:
    """`kernel` (an `@metile.kernel`) as an MLX operation whose `outputs` (names of the array parameters it writes)
    MLX creates; see `MLXKernel`."""
    return MLXKernel(kernel, outputs)


class TorchKernel:
    """A metile kernel on torch's `mps` device: `op[grid](*args, **constexprs)` compiles its MSL with
    `torch.mps.compile_shader` (once per argument types and constexprs) and dispatches it on torch's stream; the
    arguments are mps tensors and numbers, in the kernel's order."""

    def __init__(self, kernel, device: str = "mps"):
        self.kernel = kernel
        self.device = device   # the torch device type of the tensors (compile_shader's shaders run on mps)
        self._libraries: dict[str, object] = {}

    def __getitem__(self, grid):
        return lambda *args, **constexprs: self.launch(grid, args, constexprs)

    def launch(self, grid, args: tuple, constexprs: dict) -> None:
        torch = _torch()
        name = self.kernel.fn.__name__
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor) and a.device.type != self.device:
                raise KernelArgumentError(f"{name} on torch's {self.device} stream takes {self.device} tensors: "
                                          f"argument {i} is on {a.device}")
        src = kernel_source(self.kernel, tuple(args), constexprs)
        lib = self._libraries.get(src.msl)
        if lib is None:
            lib = self._libraries[src.msl] = torch.mps.compile_shader(src.msl)
        names = [s.name for s in self.kernel.source.specs if not s.constexpr]
        gx, gy, gz = _grid(grid, {**dict(zip(names, args)), **constexprs})
        try:   # the lengths of the arrays of unbounded tile accesses
            lengths = [array_elements(args[i], size) for i, size in src.lengths]
        except ArrayTooLongError as e:
            raise KernelArgumentError(f"{name}: an argument {e}") from None
        values, casts = torch_scalars(src, (*args, *lengths))
        getattr(lib, src.entry)(*values, threads=(gx * src.threads, gy, gz), group_size=(src.threads, 1, 1),
                                arg_casts=casts or None)


TORCH_CASTS = {"half": "fp16", "bfloat": "bf16", "int": "int32", "uint": "int32", "short": "int16", "ushort": "int16",
               "char": "int8", "uchar": "uint8", "bool": "uint8"}
"""The `arg_casts` name torch's kernel call takes for a scalar parameter of each MSL type: torch binds a Python int as
an int64 and a float as a float32 (`float`, `long` and `ulong` need none), so any other scalar is cast to its width."""
_TORCH_FLOATS = ("float", "half", "bfloat")


def torch_scalars(src: KernelSource, values: tuple) -> tuple[list, dict[int, str]]:
    """`values` (in buffer order) as torch's kernel call takes them: each number bound to a `constant T&` parameter as
    a Python int or float (torch takes no numpy scalar), and the `arg_casts` that make torch bind it as a `T`."""
    out, casts = list(values), {}
    for p in src.buffers:
        index = int(p.attribute[len("buffer("):-1])
        words = p.text.split()
        if words[0] != "constant" or not words[1].endswith("&") or index >= len(out):
            continue
        kind = words[1].rstrip("&")
        v = out[index]
        out[index] = float(v) if kind in _TORCH_FLOATS else int(bool(v)) if kind == "bool" else int(v)
        if kind in TORCH_CASTS:
            casts[index] = TORCH_CASTS[kind]
    return out, casts


def torch_kernel(kernel, device: str = "mps") -> TorchKernel:
    """`kernel` (an `@metile.kernel`) launched on torch's `mps` device; see `TorchKernel`."""
    return TorchKernel(kernel, device)


def _numpy_dtype(dtype) -> np.dtype:
    from metile.metal.interop import ForeignArrayError, dtype_by_name

    try:
        return dtype_by_name(dtype)
    except ForeignArrayError as e:
        raise KernelArgumentError(f"an output {e}") from None


def _mlx_scalar(mx, declaration: str):
    """The MLX dtype of a scalar parameter declared `constant T& name`."""
    kind = declaration.split()[1].rstrip("&*")
    table = {"float": mx.float32, "half": mx.float16, "int": mx.int32, "uint": mx.uint32, "short": mx.int16,
             "ushort": mx.uint16, "char": mx.int8, "uchar": mx.uint8, "bool": mx.bool_, "bfloat": mx.bfloat16,
             "long": mx.int64, "ulong": mx.uint64}
    return table[kind]


def _mlx():
    try:
        import mlx.core as mx
    except ImportError:
        raise FrameworkError("mlx_kernel needs MLX: pip install 'metile[mlx]'") from None
    return mx


def _torch():
    try:
        import torch
    except ImportError:
        raise FrameworkError("torch_kernel needs torch: pip install 'metile[torch]'") from None
    return torch


__all__ = ["FrameworkError", "KernelSource", "MLXKernel", "MLX_ATTRIBUTES", "TorchKernel", "kernel_source",
           "mlx_kernel", "torch_kernel", "torch_scalars"]
