/* mt_runtime.h - the contract between kernel code and the CPU runtime of metile's CPU device.
 *
 * Three parties use this header:
 *   - the Metal compatibility header (include/metal_compat.h), which implements barriers, simd collectives and
 *     simdgroup matrices on top of the services below;
 *   - the C++ translation unit generated from a .metal file by the MSL front end (metile/metal/cpu/msl.py), which
 *     calls mt_threadgroup_alloc / mt_threadgroup_param and exports one mt_kernel_fn per kernel function;
 *   - the runtime library (runtime.cpp), which runs threadgroups as cooperative fibers and implements the services;
 *     Python binds its launch interface (the second half of this file) with cffi.
 *
 * Everything here is plain C so that cffi can read the launch interface. Keep the two halves in step with
 * metile/metal/cpu/runtime_api.py, which holds the cffi declarations.
 */
#ifndef METILE_MT_RUNTIME_H
#define METILE_MT_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MT_SIMD_WIDTH 32u
#define MT_SLOT_BYTES 64u /* bytes a lane may publish in one simd exchange */

/* ---------------------------------------------------------------------------------------------------------------
 * Part 1: services called from kernel code
 * ------------------------------------------------------------------------------------------------------------- */

/* Position attributes of one GPU thread, filled by the runtime before its fiber starts.
 * Linear thread index in a threadgroup: x + y*tx + z*tx*ty; simdgroup = index / 32, lane = index % 32 (Apple's
 * mapping); quadgroup = index / 4, lane in quad = index % 4. For dispatch_threads with a grid that is not a multiple
 * of the threadgroup size, edge threadgroups are smaller: threads_per_threadgroup is the actual size of this
 * threadgroup and dispatch_threads_per_threadgroup the requested size. */
typedef struct mt_thread_pos {
    uint32_t thread_position_in_grid[3];
    uint32_t threadgroup_position_in_grid[3];
    uint32_t thread_position_in_threadgroup[3];
    uint32_t threads_per_threadgroup[3];
    uint32_t dispatch_threads_per_threadgroup[3];
    uint32_t threadgroups_per_grid[3];
    uint32_t threads_per_grid[3];
    uint32_t thread_index_in_threadgroup;
    uint32_t thread_index_in_simdgroup;
    uint32_t simdgroup_index_in_threadgroup;
    uint32_t simdgroups_per_threadgroup;
    uint32_t threads_per_simdgroup; /* lanes in this thread's simdgroup (32, fewer in a partial last one) */
    uint32_t thread_index_in_quadgroup;
    uint32_t quadgroup_index_in_threadgroup;
    uint32_t quadgroups_per_threadgroup;
} mt_thread_pos;

/* One kernel function as exported by a compiled kernel library: runs one GPU thread to completion (it may suspend
 * inside the services below). buffers[i] is what [[buffer(i)]] binds (for `constant T&` scalars, a pointer to the
 * value). */
typedef void (*mt_kernel_fn)(void* const* buffers, const mt_thread_pos* pos);

/* threadgroup_barrier: suspends until every simdgroup with live lanes arrived, as on Apple GPUs: a simdgroup
 * arrives when all its live lanes are suspended and those waiting at a threadgroup barrier come first in program
 * order (see mt_simd_exchange); exited lanes do not hold it, and arrivals count whatever line they come from. The
 * barrier releases the lanes waiting at it. `line` is the .metal line of the call; lanes of one simdgroup waiting
 * at two barrier lines is a barrier-divergence fault, and unless the launch sets `apple_barriers` so are a barrier
 * completing while a thread of the threadgroup is not at it (returned, or at a simd collective) and simdgroups
 * arriving from different lines (MSL requires every thread to execute each threadgroup barrier). */
void mt_threadgroup_barrier(uint32_t line);

/* simdgroup_barrier: suspends like a simd exchange (below) that publishes nothing: the lanes that reach it at `line`
 * wait for one another, the others take no part. */
void mt_simdgroup_barrier(uint32_t line);

/* Simd exchange, the one primitive under every simd_* / quad_* collective (and, with the product computed by the
 * runtime, under simdgroup_multiply_accumulate: mt_simd_matrix_product).
 * Copies `bytes` (<= MT_SLOT_BYTES) from `src` into this lane's slot and suspends. When every live lane of the
 * simdgroup is suspended (here, at a simdgroup barrier or at the threadgroup barrier), the exchange that comes
 * first in program order among those the lanes wait at completes, over the lanes waiting at the same position (the
 * frames below, then `line` and `site`): the active lanes of a collective in divergent control flow. It returns
 * the base of the slot array: lane j's published bytes are at base + j * MT_SLOT_BYTES for the lanes in
 * `view->live` (bit j = lane j took part; lanes elsewhere, exited or beyond a partial simdgroup are 0), and
 * `view->lane` is the calling lane's index in its simdgroup. `site` (> 0) names the collective kind (a small integer
 * chosen by the caller). The returned slots stay valid until this lane's next exchange. */
typedef struct mt_exchange_view {
    uint32_t live; /* bit j: lane j took part */
    uint32_t lane; /* the calling lane */
} mt_exchange_view;
const unsigned char* mt_simd_exchange(const void* src, uint32_t bytes, uint32_t site, uint32_t line,
                                      mt_exchange_view* view);

/* simdgroup_multiply(_accumulate)'s exchange, a simd exchange at (`line`, site MT_SITE_MATRIX_PRODUCT) whose lanes
 * publish their two elements of each 8x8 operand, in float: a0, a1 of A and b0, b1 of B at (row, col) and
 * (row, col + 1) of Apple's layout (include/mt_matrix.h). When it completes, the runtime computes the product A*B once,
 * each element summed in float in k order 0..7 from zero, and returns the calling lane's two elements of it (in
 * the same places), valid until its next exchange. A lane that takes no part, or that a partial simdgroup lacks,
 * contributes stale elements (zero for the latter). `pos` is mt_current_pos() of the calling thread. */
#define MT_SITE_MATRIX_PRODUCT 64u
const float* mt_simd_matrix_product(const mt_thread_pos* pos, float a0, float a1, float b0, float b1, uint32_t line);

/* Where a thread is in the control flow around simd collectives, kept by code the MSL front end inserts
 * (metile/metal/cpu/arms.py, guards in include/mt_diverge.h) and read by the runtime to tell which lanes reach the
 * same collective and which collective a GPU runs first (runtime_sched.cpp). f[0] is the kernel function; each
 * deeper frame is an `if`/`else`/`case` arm or a loop whose text contains a collective, or the body of a function
 * that contains one. Frames compare by (order, sub, id, count); a collective at a level by (cursor, line, site). */
#define MT_MAX_FRAMES 32u
typedef struct mt_frame {
    uint32_t order;  /* source position of the construct (the front end's token number); for a function body, its
                        caller's cursor */
    uint32_t sub;    /* function bodies: the call's number since the caller's cursor was set; arms and loops:
                        0xffffffff (after the calls made at the same position) */
    uint32_t id;     /* the construct's number from the front end */
    uint32_t count;  /* loops: the iteration (1 on the first), else 0 */
    uint32_t cursor; /* source position reached at this level: set at the start and end of each guarded statement */
    uint32_t calls;  /* calls of functions with collectives made since the cursor was set */
    uint64_t hash;   /* of (order, sub, id) of this frame and (order, sub, id, count) of those above it (f[0]: 0),
                        kept by the guards for the key below */
} mt_frame;
typedef struct mt_frames {
    uint32_t depth; /* frames beyond f[0] */
    uint32_t reserved;
    uint64_t key;   /* f[depth]'s hash, count and cursor and depth mixed, kept by the guards: where a collective
                       called now would be, for the runtime's quick comparison (equal keys: equal frames) */
    mt_frame f[MT_MAX_FRAMES];
} mt_frames;

/* The frames of the running thread: the same pointer for the whole life of a GPU thread (declared `const` by the
 * compatibility header, as mt_current_pos). */
mt_frames* mt_current_frames(void);

/* Threadgroup memory declared in a kernel body (`threadgroup T name[N];`), numbered 0.. by the front end in
 * source order. Returns the storage of declaration `slot` for the current threadgroup: the same pointer for every
 * thread of the threadgroup, `bytes` long, aligned to `align`, ending against an inaccessible guard page. Its
 * contents at the start of each threadgroup are the launch's fill pattern. Exceeding the launch's threadgroup
 * memory limit (all slots plus [[threadgroup(i)]] parameters) is a fault reported at `line`. */
void* mt_threadgroup_alloc(uint32_t slot, size_t bytes, size_t align, uint32_t line);

/* Storage for the [[threadgroup(index)]] kernel parameter of the current threadgroup (sizes given at launch). */
void* mt_threadgroup_param(uint32_t index);

/* Let the other fibers of this worker run (atomics call it now and then, so a thread spinning on another thread
 * of its own threadgroup makes progress). */
void mt_yield(void);

/* Position of the thread currently running on this OS thread. The pointer stays the same for the whole life of a
 * GPU thread (the compatibility header declares this function `const` so calls can be shared). */
const mt_thread_pos* mt_current_pos(void);

/* A fault detected by kernel-side code (e.g. the compatibility header): abandons the launch. Does not return. */
void mt_kernel_fault(int32_t kind, const char* message, uint32_t line) __attribute__((noreturn));

/* An access of `bytes` bytes at `address` through a checked device pointer (include/mt_checked.h) that does not lie
 * wholly within its buffer of `length` bytes at `base`: a bad-access fault at that address, found before the access,
 * located at the instruction that called this (clang would merge the calls of a function into one, losing their
 * lines, were it not for `nomerge`). Does not return. */
#if defined(__clang__)
#define MT_NOMERGE __attribute__((nomerge))
#else
#define MT_NOMERGE
#endif
void mt_bounds_fault(const void* address, uintptr_t bytes, const void* base, uintptr_t length)
    __attribute__((noreturn, cold, noinline)) MT_NOMERGE;

/* A line printed by kernel code (device_print): formatted as printf does, written whole to the process's standard
 * output and flushed, one thread's line at a time. */
void mt_device_print(const char* format, ...) __attribute__((format(printf, 1, 2)));

/* Sanitizer: one access of kernel code to memory (only threadgroup memory is tracked). Called by the __tsan_*
 * hooks of sanitized kernel libraries (mt_sanitizer_hooks.cpp); `pc` is the accessing instruction. */
void mt_san_access(const void* addr, uint32_t size, int32_t is_write, const void* pc);

/* Profiling: a simdgroup_matrix operation at .metal `line`, counted once per simdgroup (kind: 0 load, 1 store,
 * 2 multiply-accumulate; dtype: MT_PROF_DTYPE_*; the lanes of one operation are told apart by the calling
 * instruction). Called by the compatibility header in instrumented (sanitizer) builds only; does nothing unless
 * the threadgroup is profiled. */
void mt_prof_event(uint32_t kind, uint32_t dtype, uint32_t line);

/* Profiling: add `amount` to counter `counter` (enum mt_prof_counter) at .metal `line`: once per simdgroup when
 * `per_simdgroup` (every lane calls it; the lanes of one operation are told apart by the calling instruction), else
 * at each call. mt_prof_pause(1) stops counting the memory accesses of the calling thread until mt_prof_pause(0)
 * (a tensor op's inner loops, whose traffic the header counts once per operand element instead). Both do nothing
 * unless the threadgroup is profiled; the compatibility header, and before each statement the kernel text itself
 * (alu_counts.py: the arithmetic counters), call them in instrumented builds only. */
void mt_prof_count(uint32_t counter, uint64_t amount, int32_t per_simdgroup, uint32_t line);
void mt_prof_pause(int32_t paused);

/* ---------------------------------------------------------------------------------------------------------------
 * Part 2: the launch interface, bound by Python with cffi
 * ------------------------------------------------------------------------------------------------------------- */

enum mt_fault_kind {
    MT_OK = 0,
    MT_FAULT_BAD_ACCESS = 1,         /* SIGSEGV/SIGBUS on a data address (guard page, unmapped) */
    MT_FAULT_MISALIGNED = 2,         /* misaligned access (alignment trap) */
    MT_FAULT_DIV_ZERO = 3,           /* integer division by zero */
    MT_FAULT_BARRIER_DIVERGENCE = 4, /* one simdgroup at two barrier lines (sanitize: simdgroups at two lines,
                                        exit while others wait) */
    MT_FAULT_SIMD_DIVERGENCE = 5,    /* unused: collectives run over the lanes that reach them (kept for the ABI) */
    MT_FAULT_HANG = 6,               /* watchdog timeout */
    MT_FAULT_TG_MEMORY = 7,          /* threadgroup memory over the limit */
    MT_FAULT_STACK_OVERFLOW = 8,     /* a fiber overflowed its stack */
    MT_FAULT_TRAP = 9,               /* other trap (SIGILL/SIGTRAP) in kernel code */
    MT_FAULT_SAN_UNINIT = 10,        /* sanitizer: read of uninitialised threadgroup memory */
    MT_FAULT_SAN_RACE = 11,          /* sanitizer: conflicting threadgroup accesses between barriers */
    MT_FAULT_KERNEL = 12,            /* reported by kernel-side code through mt_kernel_fault */
    MT_FAULT_INTERNAL = 13,          /* runtime failure (out of memory, bad launch description) */
};

typedef struct mt_fault {
    int32_t kind;
    uint32_t threadgroup[3];     /* threadgroup_position_in_grid of the faulting thread */
    uint32_t thread[3];          /* thread_position_in_threadgroup */
    uint32_t line;               /* .metal line when the runtime knows it (barriers, collectives, alloc), else 0 */
    uint64_t address;            /* data address involved (signal si_addr, sanitizer address), else 0 */
    uint64_t pc_offset;          /* faulting instruction as an offset in its module, else 0 */
    char module[512];            /* path of the module holding the pc (dladdr), "" if unknown */
    /* the other party of a race or divergence, when there is one */
    int32_t has_other;
    uint32_t other_thread[3];
    uint32_t other_line;
    uint64_t other_pc_offset;
    char message[512];           /* human-readable detail from the runtime */
    uint32_t address_span;       /* bad access found by a watchpoint: somewhere in [address, address + span) */
} mt_fault;

/* Profiling (runtime_profile.cpp): counts of the threadgroups a launch selects, per instruction of the kernel and
 * per .metal line. Counters of one entry, by index: */
enum mt_prof_counter {
    MT_PROF_DEV_READ_BYTES = 0,  /* device memory (bound buffers): bytes the lanes read */
    MT_PROF_DEV_WRITE_BYTES,     /* bytes written */
    MT_PROF_DEV_LANE_OPS,        /* lane accesses */
    MT_PROF_DEV_SIMD_OPS,        /* simdgroup-wide instructions (one instruction of the active lanes) */
    MT_PROF_DEV_SEGMENTS,        /* distinct aligned segments those instructions touch, summed */
    MT_PROF_DEV_ACTIVE_LANES,    /* active lanes of those instructions, summed */
    MT_PROF_DEV_DISTINCT_BYTES,  /* distinct bytes those instructions touch (a byte two lanes touch counts once) */
    MT_PROF_TG_READ_BYTES,       /* threadgroup memory: bytes read */
    MT_PROF_TG_WRITE_BYTES,      /* bytes written */
    MT_PROF_TG_LANE_OPS,         /* lane accesses */
    MT_PROF_TG_SIMD_OPS,         /* simdgroup-wide instructions */
    MT_PROF_TG_PASSES,           /* passes of those instructions (the most distinct words any one bank holds) */
    MT_PROF_TG_CONFLICTS,        /* passes beyond the fewest the distinct words need (bank conflicts), summed */
    MT_PROF_ATOMICS,             /* atomic operations (lanes), device or threadgroup */
    MT_PROF_TG_BARRIERS,         /* threadgroup barriers completed (once per threadgroup) */
    MT_PROF_SG_BARRIERS,         /* simdgroup barriers completed (once per simdgroup) */
    MT_PROF_COLLECTIVES,         /* simd and quad collectives completed (once per simdgroup) */
    MT_PROF_MAT_LOAD,            /* simdgroup_matrix loads, by dtype: + MT_PROF_DTYPE_* */
    MT_PROF_MAT_STORE = MT_PROF_MAT_LOAD + 4,
    MT_PROF_MMA = MT_PROF_MAT_STORE + 4, /* simdgroup_matrix multiply(-accumulate)s by input dtype */
    MT_PROF_DEV_LOAD_SEGMENTS = MT_PROF_MMA + 4, /* MT_PROF_DEV_SEGMENTS of the loads (not stores, not atomics) */
    MT_PROF_DEV_LOAD_DISTINCT_BYTES,             /* MT_PROF_DEV_DISTINCT_BYTES of the loads */
    MT_PROF_TENSOR_FLOPS,        /* matmul2d FLOPs at execution_simdgroup(s), by input type: + MT_PROF_TENSOR_* */
    MT_PROF_TENSOR_THREAD_FLOPS = MT_PROF_TENSOR_FLOPS + 4, /* matmul2d FLOPs at execution_thread, the same way */
    MT_PROF_TENSOR_RUNS = MT_PROF_TENSOR_THREAD_FLOPS + 4,  /* matmul2d runs: + 0 per thread at execution_thread,
                                                               + 1 per simdgroup at execution_simdgroup, + 2 per
                                                               threadgroup at execution_simdgroups<N> */
    MT_PROF_COOP_LOADS = MT_PROF_TENSOR_RUNS + 3, /* cooperative tensor loads (once per simdgroup) */
    MT_PROF_COOP_STORES,                          /* cooperative tensor stores */
    MT_PROF_ALU_FLOAT,           /* float ALU operations of the statements run, lane components (once per simdgroup) */
    MT_PROF_ALU_INT,             /* integer ALU operations, the same way */
    MT_PROF_ALU_SPECIAL,         /* special-function operations (exp2, log2, rsqrt, sin, a reciprocal...), the same */
    MT_PROF_ALU_INT_ISSUE,       /* issue cycles of the integer operations outside subscripts and loop control */
    MT_PROF_COUNTERS
};
enum mt_prof_dtype { MT_PROF_DTYPE_FLOAT = 0, MT_PROF_DTYPE_HALF, MT_PROF_DTYPE_BFLOAT, MT_PROF_DTYPE_OTHER };
/* the input types of matmul2d's counters: float is full precision, tf32 float with relaxed_precision */
enum mt_prof_tensor_type { MT_PROF_TENSOR_FLOAT = 0, MT_PROF_TENSOR_HALF, MT_PROF_TENSOR_BFLOAT, MT_PROF_TENSOR_TF32 };

/* What to count: the threadgroups (sorted linear indices x + y*gx + z*gx*gy), the device buffers (spans
 * [lo, hi) of the bound buffers, in binding order), and the model parameters. */
typedef struct mt_profile_desc {
    const uint64_t* threadgroups;
    uint32_t n_threadgroups;
    uint32_t n_device;
    const uint64_t* device_lo;
    const uint64_t* device_hi;
    uint32_t segment_bytes;      /* coalescing segment (a power of 2) */
    uint32_t banks, bank_bytes;  /* threadgroup-memory banks and their width (bank_bytes a power of 2) */
    uint32_t only_counted;       /* 1: run the counted threadgroups only (to count a dispatch too large to run) */
} mt_profile_desc;

/* One entry: an instruction (pc_offset in `module`, line 0) or a .metal line the runtime knows itself (barriers and
 * collectives: pc_offset 0). */
typedef struct mt_prof_entry {
    uint64_t pc_offset;
    uint32_t line;
    uint32_t reserved;
    uint64_t c[MT_PROF_COUNTERS];
} mt_prof_entry;

/* The counts of a launch (filled by mt_launch when desc->profile is set; free with mt_profile_free). */
typedef struct mt_profile_result {
    uint64_t threadgroups;        /* threadgroups counted */
    uint64_t unique_tg_bytes;     /* device bytes each counted threadgroup touched, once per threadgroup, summed */
    uint64_t unique_bytes;        /* device bytes any counted threadgroup touched, once */
    uint64_t unique_tg_segments;  /* the same two in aligned segments (segment_bytes) */
    uint64_t unique_segments;
    uint64_t max_tg_memory;       /* threadgroup memory of the largest counted threadgroup */
    uint32_t n_entries;
    uint32_t reserved;
    mt_prof_entry* entries;
    char module[512];             /* the kernel library the pc offsets are in */
    /* the device segments (address >> log2 segment_bytes) each counted threadgroup touched, in order, as steps of
     * distinct segments each ended by UINT64_MAX (runtime_trace.h); per threadgroup in dispatch order its linear
     * index and the start and end of its steps in `trace` (3 numbers each) */
    uint64_t* trace;
    uint64_t n_trace;
    uint64_t* trace_threadgroups;
    uint64_t n_trace_threadgroups;
    uint32_t trace_complete;      /* 1: every counted threadgroup's steps are there (else some were left out) */
    uint32_t trace_step_segments; /* the most segments a step holds */
} mt_profile_result;

void mt_profile_free(mt_profile_result* r);

typedef struct mt_launch_desc {
    mt_kernel_fn fn;
    void* const* buffers;          /* [[buffer(i)]] bindings */
    uint32_t n_buffers;
    const size_t* tg_param_bytes;  /* sizes of [[threadgroup(i)]] parameters */
    uint32_t n_tg_params;
    uint32_t threadgroups[3];      /* number of threadgroups in each dimension */
    uint32_t threads_per_tg[3];    /* requested threadgroup size */
    uint32_t grid_threads[3];      /* total threads (dispatch_threads: may leave edge groups partial);
                                      for dispatch_threadgroups pass threadgroups * threads_per_tg */
    uint32_t workers;              /* OS worker threads; 0 = one per core */
    double timeout_s;              /* watchdog: a launch running longer is stopped with MT_FAULT_HANG; 0 = none */
    int32_t sanitize;              /* 1: track threadgroup memory through mt_san_access (uninit reads, races) */
    int32_t reverse_order;         /* 1: run the threads of a threadgroup in reverse order (differential checks) */
    uint8_t tg_fill;               /* byte written over threadgroup memory at the start of each threadgroup */
    size_t max_tg_memory;          /* bytes of threadgroup memory allowed per threadgroup */
    size_t stack_bytes;            /* stack per fiber (0 = default, 64 KiB) */
    const mt_profile_desc* profile; /* non-null: count (needs the instrumented build of the kernel: fn from the
                                      sanitizer build); the counts go to *profile_out */
    mt_profile_result* profile_out;
    int32_t apple_barriers;        /* 1: count threadgroup barriers per simdgroup as Apple GPUs do, letting returned
                                      threads and arrivals from other barrier lines pass; 0: those are faults */
    const uint32_t* watch_buffers; /* [[buffer(i)]] indices whose first bytes before the start hardware watchpoints
                                      cover, as far as the CPU has them (mt_watch_available), in order of preference;
                                      an access there is a bad-access fault at its line */
    uint32_t n_watch_buffers;
} mt_launch_desc;

/* Run a dispatch to completion. Returns MT_OK or the fault kind, with details in *fault. Safe to call again after a
 * fault; launches from several OS threads are serialised. */
int32_t mt_launch(const mt_launch_desc* desc, mt_fault* fault);

/* Device memory for buffers: `bytes` usable bytes whose start is 16-byte aligned and whose end lies within 16 bytes
 * of a PROT_NONE guard (a guard also precedes the mapping; the bytes between it and the start hold 0xFE, which
 * reads as no plausible datum, and are checked for writes after each launch that binds the buffer). The bytes read as
 * zero. Returns NULL on failure. */
void* mt_buffer_alloc(size_t bytes);
/* mt_buffer_alloc whose `bytes` bytes are left as they are (a freed buffer's, reused), for a caller that writes all
 * of them at once; the bytes after them up to the guard are zero. */
void* mt_buffer_alloc_staging(size_t bytes);
void mt_buffer_free(void* data);
/* The whole mapping of a buffer from mt_buffer_alloc, guards included: [*lo, *hi). Returns 0 for other pointers.
 * Mappings never overlap, so a faulting address names at most one buffer. */
int32_t mt_buffer_extent(const void* data, uint64_t* lo, uint64_t* hi);

/* 1 when this process can set the hardware watchpoints of mt_launch_desc.watch_buffers (x86-64 Linux >= 5.13,
 * where perf_event_open is allowed), else 0. */
int32_t mt_watch_available(void);

/* How many system calls launches have made to set themselves up since the process started: signal handlers, signal
 * masks, the calling thread's signal stack and watchdog timer, every worker's watchpoints, the count of usable CPUs
 * (not the waking of pool workers, nor faults): what a launch costs besides running its threadgroups. */
uint64_t mt_launch_syscalls(void);

/* Version of this interface; bumped on any change of the structures or services above. */
uint32_t mt_runtime_abi_version(void);
#define MT_RUNTIME_ABI_VERSION 12u

#ifdef __cplusplus
}
#endif

#endif /* METILE_MT_RUNTIME_H */
