/* The decisions of metile's Metal shim, as plain C: shim.m makes each of them with these functions and then does what
 * they say with Metal, and the tests' C stand-in (tests/metal_stub/stub_shim.c) makes them with the same functions and
 * models what Metal then does, so that the tests exercise the shim's own logic rather than a copy of it.
 *
 * - the macOS version: a process told 16.x by macOS 26 (a program built with an SDK older than 26, Apple's system
 *   version compatibility) is on 26.x; what is asked only of macOS 26 (the Metal 4 family, MSL 4) and 15 (mathMode);
 * - which device is taken (the default one, else the first of all devices);
 * - what is wrong with a dispatch before anything is encoded (bindings, offsets and their alignment, the span a
 *   binding is used for, dimensions, threads, dispatchThreads);
 * - what each [[buffer(i)]] entry of an encoder's argument table becomes at a dispatch: Metal keeps the entries of the
 *   previous dispatch of the same encoder, so an index the dispatch leaves unbound is cleared when it was bound;
 * - how encoders are ordered: each one waits for the fence the one before it updated, and updates it, because memory
 *   Metal does not track (MLX's buffers are MTLHazardTrackingModeUntracked) is not ordered between encoders otherwise;
 *   the dispatches of one encoder run serially (MTLDispatchTypeSerial), each after the one before it;
 * - a command buffer's state: committed only once its commit returned, waited for only when committed;
 * - the command buffer's error options: each encoder's execution status only when asked (it costs CPU time).
 */
#ifndef METILE_METAL_SHIM_LOGIC_H
#define METILE_METAL_SHIM_LOGIC_H

#include <stddef.h>
#include <stdint.h>

#include "shim.h"

/* -- the system -------------------------------------------------------------------------------------------------- */

/* The macOS major version a process is on, from the one it is told: 16 is macOS 26 seen by a program built with an
 * older SDK (as 10.16 was macOS 11). */
static inline long mts_macos_major(long reported) {
    return reported == 16 ? 26 : reported;
}

/* Whether the Metal 4 family is asked about, and MSL 4 compiled: macOS 26 and later. */
static inline int mts_has_metal4(long macos_major) {
    return macos_major >= 26;
}

/* Whether compile options set mathMode and mathFloatingPointFunctions (macOS 15 and later) rather than the deprecated
 * fastMathEnabled. */
static inline int mts_uses_math_mode(long macos_major) {
    return macos_major >= 15;
}

enum { MTS_DEVICE_DEFAULT = 0, MTS_DEVICE_FIRST_OF_ALL = 1, MTS_DEVICE_NONE = 2 };

/* Which device to take: the system default, else (a command-line process that has not loaded CoreGraphics may get
 * none) the first of all devices, else none. */
static inline int mts_choose_device(int has_default, size_t n_devices) {
    if (has_default) {
        return MTS_DEVICE_DEFAULT;
    }
    return n_devices > 0 ? MTS_DEVICE_FIRST_OF_ALL : MTS_DEVICE_NONE;
}

/* -- a dispatch -------------------------------------------------------------------------------------------------- */

/* What is wrong with a dispatch (NULL: nothing). buffer_lengths[i] is the length of bindings[i].buffer (unread when
 * it has none). */
static inline const char* mts_encode_problem(int32_t kind, int nonuniform, const uint32_t size[3],
                                             const uint32_t threads[3], uint64_t max_threads,
                                             const mts_binding* bindings, const uint64_t* buffer_lengths,
                                             uint32_t n_bindings, uint32_t n_threadgroup_memory) {
    if (n_bindings > MTS_MAX_BINDINGS || n_threadgroup_memory > MTS_MAX_BINDINGS) {
        return "mts_commands_encode: more than 31 buffer or threadgroup memory bindings";
    }
    for (int i = 0; i < 3; i++) {
        if (size[i] == 0 || threads[i] == 0) {
            return "mts_commands_encode: a grid or threadgroup dimension is zero";
        }
    }
    if ((uint64_t)threads[0] * threads[1] * threads[2] > max_threads) {
        return "mts_commands_encode: more threads per threadgroup than the pipeline's maxTotalThreadsPerThreadgroup";
    }
    if (kind == MTS_DISPATCH_THREADS && !nonuniform) {
        return "mts_commands_encode: dispatchThreads needs non-uniform threadgroups (MTLGPUFamilyApple4)";
    }
    for (uint32_t i = 0; i < n_bindings; i++) {
        const mts_binding* b = &bindings[i];
        if (b->buffer != NULL) {
            uint64_t length = buffer_lengths[i];
            if (b->offset >= length) {
                return "mts_commands_encode: a binding's offset is past the end of its buffer";
            }
            if (b->length > length - b->offset) {
                return "mts_commands_encode: a binding uses bytes past the end of its buffer (offset + length)";
            }
            if (b->align > 16 || (b->align & (b->align - 1)) != 0) {
                return "mts_commands_encode: a binding's alignment is not a power of two of at most 16 bytes";
            }
            if (b->align > 1 && b->offset % b->align != 0) {
                return "mts_commands_encode: a binding's offset is not a multiple of the alignment of its type";
            }
        } else if (b->bytes != NULL && (b->length == 0 || b->length > MTS_MAX_INLINE_BYTES)) {
            return "mts_commands_encode: inline bytes must be 1..4095";
        }
    }
    return NULL;
}

enum { MTS_BIND_KEEP = 0, MTS_BIND_BUFFER = 1, MTS_BIND_BYTES = 2, MTS_BIND_CLEAR = 3 };

/* What argument table entry i of an encoder becomes at a dispatch of `bindings`; `bound` holds a bit per entry the
 * encoder has set (cleared when the encoder is opened), updated here. An entry the dispatch leaves unbound is cleared
 * when it holds a previous dispatch's binding, which Metal would otherwise keep. */
static inline int mts_binding_action(const mts_binding* bindings, uint32_t n_bindings, uint32_t i, uint32_t* bound) {
    uint32_t bit = (uint32_t)1 << i;
    if (i < n_bindings && bindings[i].buffer != NULL) {
        *bound |= bit;
        return MTS_BIND_BUFFER;
    }
    if (i < n_bindings && bindings[i].bytes != NULL) {
        *bound |= bit;
        return MTS_BIND_BYTES;
    }
    if (*bound & bit) {
        *bound &= ~bit;
        return MTS_BIND_CLEAR;
    }
    return MTS_BIND_KEEP;
}

/* -- encoders and command buffers ----------------------------------------------------------------------------------- */

/* Whether a new encoder waits for the device's fence before its dispatches: when an encoder before it (of this
 * command buffer or an earlier one of the queue) updated the fence. Every encoder updates it after its dispatches. */
static inline int mts_encoder_waits(int fence_updated) {
    return fence_updated != 0;
}

/* The error options of a new command buffer: each encoder's execution status (which names the encoder that faulted)
 * only when `flags` asks for it. */
static inline int mts_wants_encoder_status(int32_t flags) {
    return (flags & MTS_COMMANDS_ENCODER_STATUS) != 0;
}

enum { MTS_CB_OPEN = 0, MTS_CB_COMMITTED = 1, MTS_CB_COMMIT_FAILED = 2 };

/* A command buffer's state after a commit that returned (`returned`) or threw. */
static inline int mts_state_after_commit(int returned) {
    return returned ? MTS_CB_COMMITTED : MTS_CB_COMMIT_FAILED;
}

/* Whether a command buffer in `state` may be waited for: only a committed one completes (waiting for one whose commit
 * threw would never return). */
static inline int mts_may_wait(int state) {
    return state == MTS_CB_COMMITTED;
}

#endif /* METILE_METAL_SHIM_LOGIC_H */
