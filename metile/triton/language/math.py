"""`triton.language.math`: Triton 3.4's math functions (also names of `triton.language`). Each only means something
inside a `@triton.jit` kernel (`metile.triton.impl_math`); as ordinary Python it raises `OutsideKernelError`."""

from __future__ import annotations

from metile.frontend.errors import OutsideKernelError


def _outside(name: str):
    raise OutsideKernelError(f"tl.math.{name}() can only be used inside a @triton.jit function")


def umulhi(x, y): _outside("umulhi")
def exp(x): _outside("exp")
def exp2(x): _outside("exp2")
def log(x): _outside("log")
def log2(x): _outside("log2")
def cos(x): _outside("cos")
def sin(x): _outside("sin")
def sqrt(x): _outside("sqrt")
def sqrt_rn(x): _outside("sqrt_rn")
def rsqrt(x): _outside("rsqrt")
def abs(x): _outside("abs")  # noqa: A001 - Triton's name
def fdiv(x, y, ieee_rounding=False): _outside("fdiv")
def div_rn(x, y): _outside("div_rn")
def erf(x): _outside("erf")
def floor(x): _outside("floor")
def ceil(x): _outside("ceil")
def fma(x, y, z): _outside("fma")


__all__ = ["abs", "ceil", "cos", "div_rn", "erf", "exp", "exp2", "fdiv", "floor", "fma", "log", "log2", "rsqrt",
           "sin", "sqrt", "sqrt_rn", "umulhi"]
