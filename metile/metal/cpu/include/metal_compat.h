/* metal_compat.h - the Metal Shading Language standard library for metile's CPU device.
 *
 * The MSL front end (metile/metal/cpu/msl.py) puts `#include "metal_compat.h"` before the MSL text of a .metal
 * file, so this header makes MSL compile as C++17 (g++ >= 12, clang++ >= 15): scalar and vector types, math,
 * barriers, simd collectives, simdgroup matrices and atomics, with synchronisation going through the runtime
 * services of mt_runtime.h. It is also compiled alone as a precompiled header, so it is self-contained, and it
 * includes no std header (compile time). The address-space words are defined last, as empty macros, so that no
 * header included before them sees `thread` or `device` redefined.
 *
 * Parts: mt_base.h (scalars, traits, constants), mt_vec.h + mt_swizzle.h (vectors), mt_math.h (math, integer,
 * geometric and relational functions), mt_simd.h (barriers, simd and quad collectives), mt_diverge.h (control-flow frames
 * around collectives, put in by the front end), mt_matrix.h
 * (simdgroup_matrix), mt_atomic.h (atomics), mt_checked.h (the checked device pointers of checked builds),
 * mt_intrinsics.h (the __metal_* builtins real-world MSL calls).
 */
#ifndef METILE_METAL_COMPAT_H
#define METILE_METAL_COMPAT_H

#if __has_include("mt_runtime.h")
#include "mt_runtime.h"
#else
#include "../mt_runtime.h"
#endif

#include "mt_base.h"
#include "mt_vec.h"
#include "mt_math.h"
#include "mt_simd.h"
#include "mt_diverge.h"
#include "mt_intrinsics.h"
#include "mt_matrix.h"
#include "mt_atomic.h"
#include "mt_checked.h"

/* MSL code may name everything unqualified, with or without `using namespace metal;`. */
using namespace metal;

/* Printing and assertions of metile's kernels (device_print, device_assert: metile/emit/debug.py): on the CPU device
 * a line goes to standard output, and a failed assertion is a fault at the line of the call. The MSL metile emits
 * defines both as nothing when METILE_DEVICE_DEBUG is not defined (on an Apple GPU). */
#define METILE_DEVICE_DEBUG 1
#define metile_device_print(...) mt_device_print(__VA_ARGS__)
#define metile_device_assert(cond, msg) ((cond) ? (void)0 : mt_kernel_fault(MT_FAULT_KERNEL, msg, __LINE__))

/* Address spaces and function qualifiers: C++ has one flat address space. */
#define device
#define constant
#define threadgroup
#define thread
#define threadgroup_imageblock
#define ray_data
#define object_data
#define kernel

#endif
