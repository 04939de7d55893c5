"""Triton's programs, memory and compiler hints in a `@triton.jit` kernel: `tl.program_id`, `tl.num_programs`,
`tl.load`, `tl.store`, the atomics, `tl.multiple_of` and its kin, `tl.assume`, `tl.debug_barrier`,
`tl.static_assert`, `tl.static_print`.

Loads and stores are metile's (`metile.frontend.builtins`) once their arguments are Triton's: a Python `mask`,
`other` or stored value is a traced value of its Triton type first, converted to the memory's type by C's rules (a
stored int 300 into uint8 memory keeps its low bits, as Triton's does). A masked load without `other` gives
metile's inactive elements where Triton's values are undefined (docs/language.md 5.3): one of the values Triton
allows. A block pointer (`metile.triton.impl_blocks`) is loaded and stored with `boundary_check` and
`padding_option`; given for other pointers, they are refused as Triton refuses them.
`tl.atomic_add`, `atomic_max`, `atomic_min`, `atomic_and`, `atomic_or`, `atomic_xor`, `atomic_xchg` and `atomic_cas`
are metile's (`metile.frontend.atomics`): relaxed, on i32 and u32 memory (f32 for add, exchange, max, min and cas;
f16 and bf16 for add and cas, the two Triton allows on them); they give the old elements (for one address once per
program, as Triton's scalar atomics run).
"""

from __future__ import annotations

from metile import language as L
from metile.frontend.atomics import ATOMICS
from metile.frontend.builtins import BUILTINS
from metile.frontend.errors import (
    CompileTimeAssertionError,
    ConstexprRequiredError,
    KernelArgumentError,
    KernelTypeError,
)
from metile.frontend.library import LIBRARY
from metile.ir.errors import Loc
from metile.ir.ops import Fence
from metile.ir.stmts import Barrier
from metile.ir.types import DType, PtrType
from metile.ir.values import Value
from metile.triton import semantic as ts
from metile.triton.impl_blocks import BlockPointer, load_block, store_block
from metile.triton.language import core as C

_SEMS = (None, "acquire", "release", "acq_rel", "relaxed")
_SCOPES = (None, "gpu", "cta", "sys")


def program_id(tr, loc, axis):
    return BUILTINS[L.program_id](tr, loc, axis)


def num_programs(tr, loc, axis):
    return LIBRARY[L.num_programs](tr, loc, axis)


def _block_pointer_options(boundary_check, padding_option, loc: Loc) -> None:
    if boundary_check not in ((), [], None) or padding_option not in ("", None):
        raise KernelArgumentError("`padding_option` or `boundary_check` argument is not supported for loading a tensor "
                                  "of pointers or loading a scalar (they are options of block pointers)", loc)


def load(tr, loc, pointer, mask, other, boundary_check, padding_option, cache_modifier, eviction_policy, volatile):
    if isinstance(pointer, BlockPointer):
        return load_block(tr, loc, pointer, mask, other, boundary_check, padding_option, volatile)
    _block_pointer_options(boundary_check, padding_option, loc)
    if mask is None and other is not None:
        raise KernelArgumentError("`other` cannot be provided without `mask`", loc)
    mask = None if mask is None else ts.to_tensor(mask, loc)
    other = None if other is None else ts.to_tensor(other, loc)
    return BUILTINS[L.load](tr, loc, pointer, mask, other, cache_modifier or "", eviction_policy or "",
                            bool(volatile))


def store(tr, loc, pointer, value, mask, boundary_check, cache_modifier, eviction_policy):
    if isinstance(pointer, BlockPointer):
        if mask is not None:
            raise KernelArgumentError("`mask` cannot be specified for storing through block pointers", loc)
        return store_block(tr, loc, pointer, value, boundary_check)
    _block_pointer_options(boundary_check, "", loc)
    value = ts.to_tensor(value, loc)
    mask = None if mask is None else ts.to_tensor(mask, loc)
    BUILTINS[L.store](tr, loc, pointer, value, mask, cache_modifier or "", eviction_policy or "")


def _options(name: str, sem, scope, loc: Loc) -> None:
    if sem not in _SEMS or scope not in _SCOPES:
        raise KernelArgumentError(f"tl.{name}: sem must be one of {_SEMS[1:]} and scope one of {_SCOPES[1:]}, not "
                                  f"{sem!r} and {scope!r}", loc)


def _atomic(name: str):
    """`tl.atomic_<name>(pointer, val, mask, sem, scope)`: metile's atomic of that name (relaxed; `sem` and `scope`
    are checked and accepted). Its value is the old elements, for one address."""
    metile_fn = getattr(L, name)

    def impl(tr, loc, pointer, val, mask, sem, scope):
        _options(name, sem, scope, loc)
        t = getattr(pointer, "type", None)
        if name != "atomic_add" and isinstance(t, PtrType) and t.dtype in (DType.F16, DType.BF16):
            raise KernelTypeError(f"tl.{name} does not take {t.dtype} memory: Triton allows tl.atomic_add and "
                                  "tl.atomic_cas on fp16 and bf16, and no other atomic", loc)
        mask = None if mask is None else ts.to_tensor(mask, loc)
        return ATOMICS[metile_fn](tr, loc, pointer, ts.to_tensor(val, loc), mask)
    impl.__name__ = name
    return impl


def atomic_cas(tr, loc, pointer, cmp, val, sem, scope):
    _options("atomic_cas", sem, scope, loc)
    return ATOMICS[L.atomic_cas](tr, loc, pointer, ts.to_tensor(cmp, loc), ts.to_tensor(val, loc))


def _hint(name: str):
    def impl(tr, loc, input, values):  # noqa: A002 - Triton's name
        vals = values if isinstance(values, (tuple, list)) else (values,)
        for v in vals:
            if isinstance(v, Value) or isinstance(v, bool) or not isinstance(v, int):
                raise KernelArgumentError(f"tl.{name}: the values must be constexpr ints, not {v!r}", loc)
        if not isinstance(input, Value):
            raise KernelArgumentError(f"tl.{name} takes a tensor, not {type(input).__name__}", loc)
        if max(1, len(input.type.shape)) != len(vals):
            raise KernelArgumentError(f"Shape of input to {name} does not match the length of values", loc)
        return input   # a hint: metile's own analysis finds what it would tell
    impl.__name__ = name
    return impl


def assume(tr, loc, cond):
    return None   # a promise about values, which metile does not need


def debug_barrier(tr, loc):
    """A threadgroup barrier that also orders device memory (`mem_device | mem_threadgroup`): the program's stores
    are done before what follows it, such as releasing a lock."""
    tr.emit(Barrier(Fence.DEVICE_AND_THREADGROUP, loc=loc))


def static_assert(tr, loc, cond, msg):
    if isinstance(cond, Value):
        raise ConstexprRequiredError("tl.static_assert needs a compile-time condition; this one is a traced value",
                                     loc)
    if not cond:
        raise CompileTimeAssertionError(f"Static assertion failed: {msg}" if msg else "Static assertion failed", loc)


def static_print(tr, loc, values, sep, end, file, flush):
    shown = [f"<traced {v.type}>" if isinstance(v, Value) else v for v in values]
    print(*shown, sep=sep, end=end, file=file, flush=flush)


MEMORY = {C.program_id: program_id, C.num_programs: num_programs, C.load: load, C.store: store,
          **{getattr(C, n): _atomic(n) for n in ("atomic_add", "atomic_max", "atomic_min", "atomic_and", "atomic_or",
                                                 "atomic_xor", "atomic_xchg")}, C.atomic_cas: atomic_cas,
          C.multiple_of: _hint("multiple_of"), C.max_contiguous: _hint("max_contiguous"),
          C.max_constancy: _hint("max_constancy"), C.assume: assume, C.debug_barrier: debug_barrier,
          C.static_assert: static_assert, C.static_print: static_print}

__all__ = ["MEMORY"]
