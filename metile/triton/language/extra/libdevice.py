"""`triton.language.extra.libdevice` (also served as `...extra.cuda.libdevice` and `...extra.hip.libdevice`): the
names of Triton 3.4's libdevice functions. Inside a `@triton.jit` kernel the ones metile computes with Metal's math
are implemented (`metile.triton.impl_math`, which lists them); the others raise `NotSupportedYetError` at the call.
Every name exists, so that `from triton.language.extra.libdevice import tanh` imports as it does with Triton."""

from __future__ import annotations

import inspect

from metile.frontend.errors import OutsideKernelError

_ARITY = {
    1: ("clz popc brev abs floor rcp64h rsqrt ceil trunc exp2 saturatef rcp_rn rcp_rz rcp_rd rcp_ru sqrt_rn sqrt_rz "
        "sqrt_rd sqrt_ru sqrt double2float_rn double2float_rz double2float_rd double2float_ru double2int_rn "
        "double2int_rz double2int_rd double2int_ru double2uint_rn double2uint_rz double2uint_rd double2uint_ru "
        "int2double_rn uint2double_rn float2int_rn float2int_rz float2int_rd float2int_ru float2uint_rn float2uint_rz "
        "float2uint_rd float2uint_ru int2float_rn int2float_rz int2float_rd int2float_ru uint2float_rn uint2float_rz "
        "uint2float_rd uint2float_ru double2loint double2hiint float2ll_rn float2ll_rz float2ll_rd float2ll_ru "
        "float2ull_rn float2ull_rz float2ull_rd float2ull_ru double2ll_rn double2ll_rz double2ll_rd double2ll_ru "
        "double2ull_rn double2ull_rz double2ull_rd double2ull_ru ll2float_rn ll2float_rz ll2float_rd ll2float_ru "
        "ull2float_rn ull2float_rz ull2float_rd ull2float_ru ll2double_rn ll2double_rz ll2double_rd ll2double_ru "
        "ull2double_rn ull2double_rz ull2double_rd ull2double_ru int_as_float float_as_int uint_as_float float_as_uint "
        "longlong_as_double double_as_longlong fast_sinf fast_cosf fast_log2f fast_logf fast_expf fast_tanf "
        "fast_exp10f fast_log10f rsqrt_rn ffs rint llrint nearbyint isnan signbit finitef isinf sin cos sinpi cospi "
        "tan log2 exp exp10 cosh sinh tanh atan asin acos log log10 log1p acosh asinh atanh expm1 cbrt rcbrt j0 j1 "
        "y0 y1 cyl_bessel_i0 cyl_bessel_i1 erf erfinv erfc erfcx erfcinv normcdfinv normcdf lgamma tgamma round "
        "llround ilogb logb isfinited"),
    2: ("mulhi mul24 fast_dividef div_rn div_rz div_rd div_ru add_rn add_rz add_rd add_ru mul_rn mul_rz mul_rd mul_ru "
        "hiloint2double fast_powf hadd rhadd sub_rn sub_rz sub_rd sub_ru copysign nextafter atan2 hypot rhypot yn jn "
        "ldexp scalbn fmod remainder pow fdim"),
    3: "byte_perm sad fma_rn fma_rz fma_rd fma_ru norm3d rnorm3d fma",
    4: "norm4d rnorm4d",
}


def _function(name: str, arity: int):
    def fn(*args):
        raise OutsideKernelError(f"libdevice.{name}() can only be used inside a @triton.jit function")
    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = __name__
    fn.__signature__ = inspect.Signature(
        [inspect.Parameter(f"arg{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD) for i in range(arity)])
    return fn


FUNCTIONS: dict[str, object] = {}
for _arity, _names in _ARITY.items():
    for _name in _names.split():
        FUNCTIONS[_name] = globals()[_name] = _function(_name, _arity)
del _arity, _names, _name

__all__ = sorted(FUNCTIONS)  # noqa: PLE0605 - built above
