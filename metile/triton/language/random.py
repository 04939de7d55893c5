"""`triton.language.random`: Triton's counter-based random numbers (Philox 4x32), with Triton 3.4's signatures.
Inside a kernel they give Triton's numbers (`metile.frontend.library`); as ordinary Python they raise
`OutsideKernelError`."""

from __future__ import annotations

from metile.frontend.errors import OutsideKernelError

N_ROUNDS_DEFAULT = 10


def _outside(name: str):
    raise OutsideKernelError(f"tl.{name}() can only be used inside a @triton.jit function")


def philox_impl(c0, c1, c2, c3, k0, k1, n_rounds=N_ROUNDS_DEFAULT): _outside("philox_impl")
def philox(seed, c0, c1, c2, c3, n_rounds=N_ROUNDS_DEFAULT): _outside("philox")
def randint(seed, offset, n_rounds=N_ROUNDS_DEFAULT): _outside("randint")
def randint4x(seed, offset, n_rounds=N_ROUNDS_DEFAULT): _outside("randint4x")
def uint_to_uniform_float(x): _outside("uint_to_uniform_float")
def rand(seed, offset, n_rounds=N_ROUNDS_DEFAULT): _outside("rand")
def rand4x(seed, offsets, n_rounds=N_ROUNDS_DEFAULT): _outside("rand4x")
def pair_uniform_to_normal(u1, u2): _outside("pair_uniform_to_normal")
def randn(seed, offset, n_rounds=N_ROUNDS_DEFAULT): _outside("randn")
def randn4x(seed, offset, n_rounds=N_ROUNDS_DEFAULT): _outside("randn4x")


__all__ = ["N_ROUNDS_DEFAULT", "pair_uniform_to_normal", "philox", "philox_impl", "rand", "rand4x", "randint",
           "randint4x", "randn", "randn4x", "uint_to_uniform_float"]
