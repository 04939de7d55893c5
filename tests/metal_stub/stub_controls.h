/* Controls of the C stand-in for the Metal shim (stub_shim.c): what tests use to configure the
 * stand-in device, read the call log, count handles, inject failures and replay dispatches.
 * The text between the CDEF markers is also the cffi declaration of these functions. */
#ifndef METILE_METAL_STUB_CONTROLS_H
#define METILE_METAL_STUB_CONTROLS_H

#include <stddef.h>
#include <stdint.h>

#include "shim.h"

/* CDEF BEGIN */
typedef struct mts_stub_dispatch {
    const char* source;                 /* MSL text of the pipeline's library */
    const char* function;
    int32_t kind;                       /* MTS_DISPATCH_THREADGROUPS or MTS_DISPATCH_THREADS */
    uint32_t size[3];                   /* threadgroups or threads, by kind */
    uint32_t threads_per_threadgroup[3];
    uint32_t n_bindings;
    void* const* binding_data;          /* per index: the bound buffer's bytes (+offset) or the setBytes copy; NULL if unbound */
    const uint64_t* binding_length;     /* bytes visible from binding_data */
    const int32_t* binding_is_bytes;    /* 1 for setBytes bindings */
    uint32_t n_threadgroup_memory;
    const uint64_t* threadgroup_memory;
} mts_stub_dispatch;

/* Runs one dispatch; returns 0, or nonzero with a message to make the command buffer fail. */
typedef int32_t (*mts_stub_executor)(const mts_stub_dispatch* dispatch, char* message, size_t message_size);

void mts_stub_reset(void);                              /* log, failures, executor and device info back to defaults */
void mts_stub_set_device_info(const mts_device_info* info);
void mts_stub_set_pipeline_info(const mts_pipeline_info* info);
void mts_stub_set_logging(int32_t on);
const char* mts_stub_log(void);                         /* one line per call since the last clear */
void mts_stub_clear_log(void);
int64_t mts_stub_created(const char* kind);             /* "device", "library", "pipeline", "buffer", "commands" */
int64_t mts_stub_live(const char* kind);                /* created and not yet released by the caller */
int64_t mts_stub_bad_releases(void);                    /* releases of handles already released */
int64_t mts_stub_buffers_in_memory(void);               /* buffers whose bytes are still allocated */
/* Make the call to `entry` (e.g. "library_from_source") that comes after `skip` more calls fail with
 * `code` and `message`; for "commands_wait" with MTS_ERR_GPU, `detail` is the MTLCommandBufferError code. */
void mts_stub_fail(const char* entry, int32_t skip, int32_t code, int32_t detail, const char* message);
void mts_stub_set_executor(mts_stub_executor executor);
/* What Metal does on the stand-in's system: wraps (0 whole, 1 newBufferWithBytesNoCopy returns nil, 2 it returns a
 * buffer one page shorter than asked, as virtualised Macs may). */
void mts_stub_set_wrap(int32_t mode);
/* The system: its macOS major version (0: not modelled, device info as set), whether MTLCreateSystemDefaultDevice
 * finds a device (else only MTLCopyAllDevices does), what supportsFamily:MTLGPUFamilyMetal4 answers, and whether the
 * MSL 4 tensor probe compiles. */
void mts_stub_set_system(int32_t os_major, int32_t default_device, int32_t metal4_family, int32_t tensor_probe);
/* How many devices MTLCopyAllDevices finds (1 unless set). */
void mts_stub_set_devices(int32_t n);
/* Whether Metal tracks hazards on the buffer (0) or not (1, MTLHazardTrackingModeUntracked, as MLX allocates them). */
void mts_stub_set_untracked(mts_buffer* buffer, int32_t untracked);
/* Waits shim.m would have made for a command buffer Metal never committed (which never return on Metal). */
int64_t mts_stub_hangs(void);
/* Whether the MSL 4 tensor probe compiles (as set_system's tensor_probe, for a system that is not modelled). */
void mts_stub_set_tensor_probe(int32_t compiles);
/* Messages a successful compile returns as warnings (NULL or "": none). */
void mts_stub_set_compile_warnings(const char* text);
/* CDEF END */

#endif
