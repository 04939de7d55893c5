/* metile's Metal shim: the plain C interface between Python (cffi) and Apple's Metal framework.
 *
 * This header is the single source of truth for three things: the Objective-C implementation
 * (shim.m), the C stand-in the tests compile on machines without Metal (tests/metal_stub), and the
 * cffi declarations, which are the text between the CDEF BEGIN and CDEF END lines below.
 *
 * Conventions
 * - Every entry point that can fail returns MTS_OK (0) or an MTS_ERR_* code. On failure it stores a
 *   message in *err (when err is not NULL), which the caller frees with mts_string_free.
 * - No Objective-C exception leaves an entry point: each one catches them and returns
 *   MTS_ERR_EXCEPTION with the exception's name and reason.
 * - Handles are owned by the caller and released exactly once with the matching *_release function
 *   (NULL is ignored). A buffer's contents stay valid until the buffer is released.
 * - Launches: mts_commands_begin opens a command buffer; mts_commands_encode calls add dispatches to it,
 *   in order (encoders ordered by a fence, dispatches of an encoder serial); mts_commands_commit ends the
 *   encoder and commits; mts_commands_wait waits and reports GPU errors and timestamps.
 * - The decisions the implementation makes are the plain C functions of shim_logic.h, shared with the stand-in.
 */
#ifndef METILE_METAL_SHIM_H
#define METILE_METAL_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CDEF BEGIN */
#define MTS_ABI_VERSION 5

#define MTS_OK 0
#define MTS_ERR_NO_DEVICE 1
#define MTS_ERR_COMPILE 2
#define MTS_ERR_LOAD 3
#define MTS_ERR_NOT_FOUND 4
#define MTS_ERR_PIPELINE 5
#define MTS_ERR_ALLOC 6
#define MTS_ERR_ARGUMENT 7
#define MTS_ERR_STATE 8
#define MTS_ERR_GPU 9
#define MTS_ERR_EXCEPTION 10

#define MTS_DISPATCH_THREADGROUPS 0
#define MTS_DISPATCH_THREADS 1

/* mts_commands_begin flags: report each encoder's execution status (a fault then names its encoder; costs CPU time) */
#define MTS_COMMANDS_ENCODER_STATUS 1

/* largest setBytes binding; larger constant data goes into a buffer */
#define MTS_MAX_INLINE_BYTES 4095
/* buffer argument table entries of a compute encoder ([[buffer(0)]] .. [[buffer(30)]]) */
#define MTS_MAX_BINDINGS 31

typedef struct mts_device mts_device;
typedef struct mts_library mts_library;
typedef struct mts_pipeline mts_pipeline;
typedef struct mts_buffer mts_buffer;
typedef struct mts_commands mts_commands;

typedef struct mts_device_info {
    char name[256];                          /* MTLDevice.name */
    uint32_t apple_family;                   /* highest of Apple7..Apple10 the device supports, 0 if none */
    uint32_t max_threads_per_threadgroup[3]; /* maxThreadsPerThreadgroup */
    uint64_t max_threadgroup_memory;         /* maxThreadgroupMemoryLength, bytes */
    uint64_t recommended_working_set;        /* recommendedMaxWorkingSetSize, bytes */
    int32_t has_unified_memory;              /* hasUnifiedMemory */
    int32_t supports_metal4;                 /* supportsFamily: MTLGPUFamilyMetal4, asked on macOS 26 or later only */
    char architecture[64];                   /* MTLDevice.architecture.name ("applegpu_g17s"), macOS 14 on; else "" */
    char os_build[32];                       /* the system's build (sysctl kern.osversion, "25C56"); "" if unknown */
    int32_t nonuniform_threadgroups;         /* supportsFamily: MTLGPUFamilyApple4 (dispatchThreads: allowed) */
} mts_device_info;

typedef struct mts_compile_options {
    uint32_t language_version;   /* an MTLLanguageVersion value, (major << 16) | minor; 0: the OS default */
    int32_t fast_math;           /* 0: IEEE-conforming math, 1: fast math */
} mts_compile_options;

typedef struct mts_pipeline_info {
    uint32_t max_total_threads_per_threadgroup;
    uint32_t thread_execution_width;
    uint64_t static_threadgroup_memory;      /* bytes of threadgroup memory the kernel declares itself */
} mts_pipeline_info;

/* One [[buffer(i)]] binding; i is the entry's position in the array passed to mts_commands_encode.
 * A non-NULL buffer is bound with setBuffer:offset:atIndex:, else non-NULL bytes with
 * setBytes:length:atIndex: (length <= MTS_MAX_INLINE_BYTES); an entry with neither is left unbound (and cleared,
 * when a previous dispatch of the same encoder bound it). For a buffer, length is the bytes the kernel may use from
 * offset (0: not known) and align what offset must be a multiple of (the alignment of the type the kernel reads,
 * a power of two up to 16; 0 or 1: none). */
typedef struct mts_binding {
    mts_buffer* buffer;
    uint64_t offset;
    const void* bytes;
    uint64_t length;
    uint32_t align;
} mts_binding;

/* One function constant value for mts_pipeline_create_specialized. With a name it is set with
 * MTLFunctionConstantValues setConstantValue:type:withName:, else with setConstantValue:type:atIndex:.
 * data_type is an MTLDataType value (MTLDataTypeBool 53, MTLDataTypeInt 29, MTLDataTypeFloat 3, ...);
 * value holds the constant's bytes as the type lays them out (a vector's components one after another). */
typedef struct mts_constant {
    const char* name;            /* NULL: by index */
    uint32_t index;
    uint32_t data_type;
    uint8_t value[32];
} mts_constant;

typedef struct mts_completion {
    int32_t status;              /* MTLCommandBufferStatus: 4 completed, 5 error */
    int32_t error_code;          /* MTLCommandBufferError code when status is 5, else 0 */
    double gpu_start;            /* GPUStartTime, seconds */
    double gpu_end;              /* GPUEndTime, seconds */
    char faulted[256];           /* on an error: the label of the encoder that faulted (its kernel), else "" */
} mts_completion;

uint32_t mts_abi_version(void);
/* Whether an MSL 4 kernel using tensors (metal_tensor) and MetalPerformancePrimitives' tensor ops compiles on this
 * device (*compiles 1 or 0; 0 without asking below macOS 26). A compile of its own: callers cache the answer. */
int32_t mts_device_probe_tensor_ops(mts_device* d, int32_t* compiles, char** err);
void mts_string_free(char* s);
size_t mts_page_size(void);

int32_t mts_device_create(mts_device** out, char** err);
void mts_device_release(mts_device* device);
int32_t mts_device_query(mts_device* device, mts_device_info* info, char** err);

/* *warnings (when not NULL) receives the compiler's messages of a successful compile, or NULL when there are none */
int32_t mts_library_from_source(mts_device* device, const char* source, const mts_compile_options* options,
                                mts_library** out, char** warnings, char** err);
int32_t mts_library_from_file(mts_device* device, const char* path, mts_library** out, char** err);
void mts_library_release(mts_library* library);

int32_t mts_pipeline_create(mts_device* device, mts_library* library, const char* function_name,
                            mts_pipeline** out, mts_pipeline_info* info, char** err);
/* The pipeline of a function specialised with function constant values (newFunctionWithName:constantValues:error:);
 * n_constants may be 0 (a function whose constants are all optional and unset). */
int32_t mts_pipeline_create_specialized(mts_device* device, mts_library* library, const char* function_name,
                                        const mts_constant* constants, uint32_t n_constants,
                                        mts_pipeline** out, mts_pipeline_info* info, char** err);
void mts_pipeline_release(mts_pipeline* pipeline);

/* shared storage; *contents receives the CPU address of the bytes */
int32_t mts_buffer_new(mts_device* device, size_t length, mts_buffer** out, void** contents, char** err);
int32_t mts_buffer_new_copy(mts_device* device, const void* bytes, size_t length, mts_buffer** out,
                            void** contents, char** err);
/* no copy: pointer must be page-aligned and length a multiple of the page size; the memory must
 * outlive the buffer. MTS_ERR_ALLOC when Metal cannot wrap it or gives a buffer shorter than length
 * (virtualised Macs do): the caller then copies instead. */
int32_t mts_buffer_wrap(mts_device* device, void* pointer, size_t length, mts_buffer** out, char** err);
void mts_buffer_release(mts_buffer* buffer);

/* A command buffer; flags: MTS_COMMANDS_ENCODER_STATUS makes its errors report each encoder's execution status (the
 * encoder that faulted). */
int32_t mts_commands_begin(mts_device* device, int32_t flags, mts_commands** out, char** err);
/* Everything is checked before the first encoder call (shim_logic.h, mts_encode_problem): at most MTS_MAX_BINDINGS
 * bindings, offsets within their buffers and aligned as asked, offset + length within them, no zero dimension, no
 * more threads per threadgroup than the pipeline allows, and dispatch_threads only on devices with non-uniform
 * threadgroups. Consecutive dispatches of one label (the kernel's name) share an encoder labelled with it, and run
 * serially; each encoder waits for the fence the previous encoder updated (memory Metal does not track, as MLX's, is
 * ordered so too). */
int32_t mts_commands_encode(mts_commands* commands, mts_pipeline* pipeline, const char* label, int32_t kind,
                            uint32_t size_x, uint32_t size_y, uint32_t size_z,
                            uint32_t threads_x, uint32_t threads_y, uint32_t threads_z,
                            const mts_binding* bindings, uint32_t n_bindings,
                            const uint64_t* threadgroup_memory, uint32_t n_threadgroup_memory, char** err);
int32_t mts_commands_commit(mts_commands* commands, char** err);
int32_t mts_commands_wait(mts_commands* commands, mts_completion* done, char** err);
/* A command buffer released before mts_commands_wait is committed (if it was not) and waited for first, so that
 * the GPU never runs work whose memory has been freed and no encoded dispatch is dropped. */
void mts_commands_release(mts_commands* commands);
/* CDEF END */

#ifdef __cplusplus
}
#endif

#endif /* METILE_METAL_SHIM_H */
