/* metile's Metal shim: the C interface of shim.h implemented with Apple's Metal framework.
 *
 * Targets macOS 14 or later on Apple silicon (Apple7..Apple10 GPUs), built with the clang of Xcode 15
 * or later (or its Command Line Tools). Family and Metal 4 queries use the enumeration's numeric
 * values, so the file also builds against SDKs that predate those names.
 *
 * Memory management is manual (the file is compiled with -fno-objc-arc): objects from new* methods
 * and MTLCreateSystemDefaultDevice are owned (+1) and handed to the caller as handles; objects from
 * other methods are autoreleased and retained when kept. Every entry point runs inside an
 * autorelease pool and a @try/@catch, so no Objective-C exception reaches the caller.
 */
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysctl.h>
#include <unistd.h>

#include "shim.h"
#include "shim_logic.h"

#if __has_feature(objc_arc)
#error "shim.m manages references by hand; compile it with -fno-objc-arc"
#endif

/* MTLGPUFamily values (MTLDevice.h): Apple4 = 1004 (non-uniform threadgroups), Apple7 = 1007 (M1) ...
 * Apple10 = 1010 (M5); Metal4 = 5002. MTLLanguageVersion4_0 = (4 << 16). */
static const NSInteger kFamilyApple4 = 1004;
static const NSInteger kFamilyApple7 = 1007;
static const NSInteger kFamilyMetal4 = 5002;
static const uint32_t kNewestAppleFamily = 10;
static const NSUInteger kLanguageVersion4_0 = (NSUInteger)4 << 16;

/* An MSL 4 kernel taking a tensor: it compiles where the OS's Metal compiler has tensors (metal_tensor) and the
 * tensor ops of MetalPerformancePrimitives. */
static const char* const kTensorProbe =
    "#include <metal_stdlib>\n"
    "#include <metal_tensor>\n"
    "#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>\n"
    "using namespace metal;\n"
    "kernel void mts_tensor_probe(tensor<device float, dextents<int32_t, 2>> t [[buffer(0)]]) {}\n";

struct mts_device {
    id<MTLDevice> device;
    id<MTLCommandQueue> queue;
    id<MTLFence> fence;      /* each encoder updates it, and the next one waits for it (shim_logic.h) */
    int fence_updated;       /* an encoder has updated the fence */
    int nonuniform;          /* supportsFamily: Apple4: dispatchThreads: may make partial threadgroups */
};

struct mts_commands {
    mts_device* device;                     /* its fence orders the encoders (used while encoding only) */
    id<MTLCommandBuffer> buffer;
    id<MTLComputeCommandEncoder> encoder;   /* the open encoder, nil before the first dispatch */
    char label[256];                        /* the open encoder's label (the kernel it runs) */
    uint32_t bound;                         /* the argument table entries the open encoder has set */
    int state;                              /* MTS_CB_OPEN, MTS_CB_COMMITTED or MTS_CB_COMMIT_FAILED */
    int waited;
    int nonuniform;
};

/* Handles of single objects are the objects themselves. */
#define AS_LIBRARY(h) ((id<MTLLibrary>)(void*)(h))
#define AS_PIPELINE(h) ((id<MTLComputePipelineState>)(void*)(h))
#define AS_BUFFER(h) ((id<MTLBuffer>)(void*)(h))

/* -- errors ------------------------------------------------------------------------------------------ */

static int32_t fail_text(char** err, int32_t code, const char* text) {
    if (err != NULL) {
        *err = strdup(text != NULL ? text : "unknown error");
    }
    return code;
}

static int32_t fail_ns(char** err, int32_t code, NSString* text) {
    return fail_text(err, code, text != nil ? [text UTF8String] : NULL);
}

static int32_t fail_error(char** err, int32_t code, NSString* what, NSError* error) {
    NSString* detail = error != nil ? [error localizedDescription] : @"no error description";
    return fail_ns(err, code, [NSString stringWithFormat:@"%@: %@", what, detail]);
}

static int32_t fail_exception(char** err, const char* entry, NSException* e) {
    NSString* text = [NSString stringWithFormat:@"%s: Objective-C exception %@: %@", entry, [e name], [e reason]];
    return fail_ns(err, MTS_ERR_EXCEPTION, text);
}

static int32_t fail_unknown_throw(char** err, const char* entry) {
    char text[256];
    snprintf(text, sizeof text, "%s: an Objective-C object that is not an NSException was thrown", entry);
    return fail_text(err, MTS_ERR_EXCEPTION, text);
}

static NSString* utf8_string(const char* text) {
    return text != NULL ? [NSString stringWithUTF8String:text] : nil;   /* nil for invalid UTF-8 */
}

/* The macOS major version this process is on (macOS 26 tells 16 to a Python built with an older SDK, and so would
 * @available: shim_logic.h maps it). */
static long macos_major(void) {
    return mts_macos_major((long)[[NSProcessInfo processInfo] operatingSystemVersion].majorVersion);
}

/* -- process-wide -------------------------------------------------------------------------------------- */

uint32_t mts_abi_version(void) {
    return MTS_ABI_VERSION;
}

void mts_string_free(char* s) {
    free(s);
}

size_t mts_page_size(void) {
    return (size_t)getpagesize();
}

/* -- device -------------------------------------------------------------------------------------------- */

int32_t mts_device_create(mts_device** out, char** err) {
    if (out == NULL) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_device_create: out is NULL");
    }
    *out = NULL;
    @autoreleasepool {
        @try {
            id<MTLDevice> device = MTLCreateSystemDefaultDevice();   /* owned: NS_RETURNS_RETAINED */
            /* a command-line process that has not loaded CoreGraphics may get no default device (the module links
             * it); every Metal device of the system is the fallback */
            NSArray<id<MTLDevice>>* all = device == nil ? MTLCopyAllDevices() : nil;   /* owned */
            int source = mts_choose_device(device != nil, (size_t)[all count]);
            if (source == MTS_DEVICE_FIRST_OF_ALL) {
                device = [[all objectAtIndex:0] retain];
            }
            [all release];
            if (source == MTS_DEVICE_NONE) {
                return fail_text(err, MTS_ERR_NO_DEVICE,
                                 "neither MTLCreateSystemDefaultDevice nor MTLCopyAllDevices found a Metal device");
            }
            id<MTLCommandQueue> queue = [device newCommandQueue];
            id<MTLFence> fence = queue != nil ? [device newFence] : nil;
            if (queue == nil || fence == nil) {
                [queue release];
                [device release];
                return fail_text(err, MTS_ERR_NO_DEVICE, "newCommandQueue or newFence returned nil");
            }
            mts_device* d = calloc(1, sizeof *d);
            if (d == NULL) {
                [fence release];
                [queue release];
                [device release];
                return fail_text(err, MTS_ERR_ALLOC, "out of host memory");
            }
            d->device = device;
            d->queue = queue;
            d->fence = fence;
            d->nonuniform = [device supportsFamily:(MTLGPUFamily)kFamilyApple4] ? 1 : 0;
            *out = d;
            return MTS_OK;
        } @catch (NSException* e) {
            return fail_exception(err, "mts_device_create", e);
        } @catch (id other) {
            return fail_unknown_throw(err, "mts_device_create");
        }
    }
}

void mts_device_release(mts_device* d) {
    if (d == NULL) {
        return;
    }
    @autoreleasepool {
        @try {
            [d->fence release];
            [d->queue release];
            [d->device release];
        } @catch (id ignored) {
        }
    }
    free(d);
}

int32_t mts_device_query(mts_device* d, mts_device_info* info, char** err) {
    if (d == NULL || info == NULL) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_device_query: NULL device or info");
    }
    memset(info, 0, sizeof *info);
    @autoreleasepool {
        @try {
            id<MTLDevice> device = d->device;
            const char* name = [[device name] UTF8String];
            snprintf(info->name, sizeof info->name, "%s", name != NULL ? name : "");
            for (uint32_t n = kNewestAppleFamily; n >= 7; n--) {
                if ([device supportsFamily:(MTLGPUFamily)(kFamilyApple7 + (NSInteger)(n - 7))]) {
                    info->apple_family = n;
                    break;
                }
            }
            MTLSize most = [device maxThreadsPerThreadgroup];
            info->max_threads_per_threadgroup[0] = (uint32_t)most.width;
            info->max_threads_per_threadgroup[1] = (uint32_t)most.height;
            info->max_threads_per_threadgroup[2] = (uint32_t)most.depth;
            info->max_threadgroup_memory = (uint64_t)[device maxThreadgroupMemoryLength];
            info->recommended_working_set = (uint64_t)[device recommendedMaxWorkingSetSize];
            info->has_unified_memory = [device hasUnifiedMemory] ? 1 : 0;
            info->nonuniform_threadgroups = d->nonuniform;
            /* Metal 4 is a family only macOS 26 knows: an older system is not asked */
            if (mts_has_metal4(macos_major())) {
                info->supports_metal4 = [device supportsFamily:(MTLGPUFamily)kFamilyMetal4] ? 1 : 0;
            }
            if (@available(macOS 14.0, *)) {
                const char* arch = [[[device architecture] name] UTF8String];
                snprintf(info->architecture, sizeof info->architecture, "%s", arch != NULL ? arch : "");
            }
            size_t len = sizeof info->os_build;
            if (sysctlbyname("kern.osversion", info->os_build, &len, NULL, 0) != 0) {
                info->os_build[0] = 0;
            }
            return MTS_OK;
        } @catch (NSException* e) {
            return fail_exception(err, "mts_device_query", e);
        } @catch (id other) {
            return fail_unknown_throw(err, "mts_device_query");
        }
    }
}

int32_t mts_device_probe_tensor_ops(mts_device* d, int32_t* compiles, char** err) {
    if (d == NULL || compiles == NULL) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_device_probe_tensor_ops: NULL device or result");
    }
    *compiles = 0;
    @autoreleasepool {
        @try {
            /* MSL 4 is a language only macOS 26 knows: an older system is not asked */
            if (mts_has_metal4(macos_major())) {
                MTLCompileOptions* opts = [[[MTLCompileOptions alloc] init] autorelease];
                [opts setLanguageVersion:(MTLLanguageVersion)kLanguageVersion4_0];
                NSError* error = nil;
                id<MTLLibrary> probe = [d->device newLibraryWithSource:utf8_string(kTensorProbe) options:opts
                                                                 error:&error];
                *compiles = probe != nil ? 1 : 0;
                [probe release];
            }
            return MTS_OK;
        } @catch (NSException* e) {
            return fail_exception(err, "mts_device_probe_tensor_ops", e);
        } @catch (id other) {
            return fail_unknown_throw(err, "mts_device_probe_tensor_ops");
        }
    }
}

/* -- libraries and pipelines ------------------------------------------------------------------------------ */

/* IEEE-conforming or fast math: mathMode and mathFloatingPointFunctions from macOS 15 (when the SDK has them),
 * the deprecated fastMathEnabled (which sets both) before. */
static void set_math(MTLCompileOptions* opts, int fast) {
#if defined(__MAC_15_0) && __MAC_OS_X_VERSION_MAX_ALLOWED >= __MAC_15_0
    if (mts_uses_math_mode(macos_major())) {
        if (@available(macOS 15.0, *)) {
            [opts setMathMode:fast ? MTLMathModeFast : MTLMathModeSafe];
            [opts setMathFloatingPointFunctions:fast ? MTLMathFloatingPointFunctionsFast
                                                     : MTLMathFloatingPointFunctionsPrecise];
            return;
        }
    }
#endif
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
    [opts setFastMathEnabled:fast ? YES : NO];
#pragma clang diagnostic pop
}

int32_t mts_library_from_source(mts_device* d, const char* source, const mts_compile_options* options,
                                mts_library** out, char** warnings, char** err) {
    if (d == NULL || source == NULL || out == NULL) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_library_from_source: NULL argument");
    }
    *out = NULL;
    if (warnings != NULL) {
        *warnings = NULL;
    }
    @autoreleasepool {
        @try {
            NSString* text = utf8_string(source);
            if (text == nil) {
                return fail_text(err, MTS_ERR_ARGUMENT, "the MSL source is not valid UTF-8");
            }
            MTLCompileOptions* opts = [[[MTLCompileOptions alloc] init] autorelease];
            if (options != NULL && options->language_version != 0) {
                [opts setLanguageVersion:(MTLLanguageVersion)options->language_version];
            }
            set_math(opts, options != NULL && options->fast_math);
            NSError* error = nil;
            id<MTLLibrary> library = [d->device newLibraryWithSource:text options:opts error:&error];
            if (library == nil) {
                /* the description is the compiler's log: "program_source:LINE:COL: error: ..." */
                return fail_ns(err, MTS_ERR_COMPILE,
                               error != nil ? [error localizedDescription] : @"the MSL compiler failed");
            }
            *out = (mts_library*)(void*)library;   /* owned (+1) */
            if (error != nil && warnings != NULL) {   /* a successful compile's warnings */
                const char* text = [[error localizedDescription] UTF8String];
                *warnings = text != NULL && text[0] != '\0' ? strdup(text) : NULL;
            }
            return MTS_OK;
        } @catch (NSException* e) {
            return fail_exception(err, "mts_library_from_source", e);
        } @catch (id other) {
            return fail_unknown_throw(err, "mts_library_from_source");
        }
    }
}

int32_t mts_library_from_file(mts_device* d, const char* path, mts_library** out, char** err) {
    if (d == NULL || path == NULL || out == NULL) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_library_from_file: NULL argument");
    }
    *out = NULL;
    @autoreleasepool {
        @try {
            NSString* file = utf8_string(path);
            if (file == nil) {
                return fail_text(err, MTS_ERR_ARGUMENT, "the .metallib path is not valid UTF-8");
            }
            NSError* error = nil;
            id<MTLLibrary> library = [d->device newLibraryWithURL:[NSURL fileURLWithPath:file] error:&error];
            if (library == nil) {
                return fail_error(err, MTS_ERR_LOAD, [NSString stringWithFormat:@"cannot load %@", file], error);
            }
            *out = (mts_library*)(void*)library;
            return MTS_OK;
        } @catch (NSException* e) {
            return fail_exception(err, "mts_library_from_file", e);
        } @catch (id other) {
            return fail_unknown_throw(err, "mts_library_from_file");
        }
    }
}

void mts_library_release(mts_library* library) {
    if (library == NULL) {
        return;
    }
    @autoreleasepool {
        @try {
            [AS_LIBRARY(library) release];
        } @catch (id ignored) {
        }
    }
}

/* The function `name`: newFunctionWithName: unless `specialize`, else newFunctionWithName:constantValues:error:
 * with `constants`. Returns nil with *code and *err set on failure. */
static id<MTLFunction> new_function(mts_library* library, NSString* name, const mts_constant* constants,
                                    uint32_t n_constants, int32_t specialize, int32_t* code, char** err) {
    if (!specialize) {
        id<MTLFunction> function = [AS_LIBRARY(library) newFunctionWithName:name];
        if (function == nil) {
            *code = fail_ns(err, MTS_ERR_NOT_FOUND,
                            [NSString stringWithFormat:@"the library has no function named '%@'", name]);
        }
        return function;
    }
    MTLFunctionConstantValues* values = [[MTLFunctionConstantValues alloc] init];
    for (uint32_t i = 0; i < n_constants; ++i) {
        const mts_constant* c = &constants[i];
        if (c->name != NULL) {
            NSString* constant_name = utf8_string(c->name);
            if (constant_name == nil) {
                [values release];
                *code = fail_text(err, MTS_ERR_ARGUMENT, "a function constant name is not valid UTF-8");
                return nil;
            }
            [values setConstantValue:c->value type:(MTLDataType)c->data_type withName:constant_name];
        } else {
            [values setConstantValue:c->value type:(MTLDataType)c->data_type atIndex:(NSUInteger)c->index];
        }
    }
    NSError* error = nil;
    id<MTLFunction> function = [AS_LIBRARY(library) newFunctionWithName:name constantValues:values error:&error];
    [values release];
    if (function == nil) {
        NSString* what = [NSString stringWithFormat:@"cannot specialise '%@' with the function constant values "
                                                     @"given", name];
        *code = fail_error(err, MTS_ERR_PIPELINE, what, error);
    }
    return function;
}

static int32_t create_pipeline(mts_device* d, mts_library* library, const char* function_name,
                               const mts_constant* constants, uint32_t n_constants, int32_t specialize,
                               mts_pipeline** out, mts_pipeline_info* info, char** err) {
    if (d == NULL || library == NULL || function_name == NULL || out == NULL || info == NULL
        || (n_constants > 0 && constants == NULL)) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_pipeline_create: NULL argument");
    }
    *out = NULL;
    memset(info, 0, sizeof *info);
    @autoreleasepool {
        @try {
            NSString* name = utf8_string(function_name);
            if (name == nil) {
                return fail_text(err, MTS_ERR_NOT_FOUND, "the function name is not valid UTF-8");
            }
            int32_t code = MTS_OK;
            id<MTLFunction> function = new_function(library, name, constants, n_constants, specialize, &code, err);
            if (function == nil) {
                return code;
            }
            NSError* error = nil;
            id<MTLComputePipelineState> pipeline = [d->device newComputePipelineStateWithFunction:function
                                                                                            error:&error];
            [function release];
            if (pipeline == nil) {
                NSString* what = [NSString stringWithFormat:@"cannot build a compute pipeline for '%@'", name];
                return fail_error(err, MTS_ERR_PIPELINE, what, error);
            }
            info->max_total_threads_per_threadgroup = (uint32_t)[pipeline maxTotalThreadsPerThreadgroup];
            info->thread_execution_width = (uint32_t)[pipeline threadExecutionWidth];
            info->static_threadgroup_memory = (uint64_t)[pipeline staticThreadgroupMemoryLength];
            *out = (mts_pipeline*)(void*)pipeline;
            return MTS_OK;
        } @catch (NSException* e) {
            return fail_exception(err, "mts_pipeline_create", e);
        } @catch (id other) {
            return fail_unknown_throw(err, "mts_pipeline_create");
        }
    }
}

int32_t mts_pipeline_create(mts_device* d, mts_library* library, const char* function_name,
                            mts_pipeline** out, mts_pipeline_info* info, char** err) {
    return create_pipeline(d, library, function_name, NULL, 0, 0, out, info, err);
}

int32_t mts_pipeline_create_specialized(mts_device* d, mts_library* library, const char* function_name,
                                        const mts_constant* constants, uint32_t n_constants,
                                        mts_pipeline** out, mts_pipeline_info* info, char** err) {
    return create_pipeline(d, library, function_name, constants, n_constants, 1, out, info, err);
}

void mts_pipeline_release(mts_pipeline* pipeline) {
    if (pipeline == NULL) {
        return;
    }
    @autoreleasepool {
        @try {
            [AS_PIPELINE(pipeline) release];
        } @catch (id ignored) {
        }
    }
}

/* -- buffers ----------------------------------------------------------------------------------------------- */

static int32_t finish_buffer(id<MTLBuffer> buffer, size_t length, mts_buffer** out, void** contents, char** err) {
    if (buffer == nil) {
        char text[128];
        snprintf(text, sizeof text, "cannot allocate a Metal buffer of %zu bytes", length);
        return fail_text(err, MTS_ERR_ALLOC, text);
    }
    if (contents != NULL) {
        *contents = [buffer contents];
    }
    *out = (mts_buffer*)(void*)buffer;
    return MTS_OK;
}

int32_t mts_buffer_new(mts_device* d, size_t length, mts_buffer** out, void** contents, char** err) {
    if (d == NULL || out == NULL || length == 0) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_buffer_new: NULL argument or zero length");
    }
    *out = NULL;
    @autoreleasepool {
        @try {
            id<MTLBuffer> buffer = [d->device newBufferWithLength:length options:MTLResourceStorageModeShared];
            return finish_buffer(buffer, length, out, contents, err);
        } @catch (NSException* e) {
            return fail_exception(err, "mts_buffer_new", e);
        } @catch (id other) {
            return fail_unknown_throw(err, "mts_buffer_new");
        }
    }
}

int32_t mts_buffer_new_copy(mts_device* d, const void* bytes, size_t length, mts_buffer** out, void** contents,
                            char** err) {
    if (d == NULL || bytes == NULL || out == NULL || length == 0) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_buffer_new_copy: NULL argument or zero length");
    }
    *out = NULL;
    @autoreleasepool {
        @try {
            id<MTLBuffer> buffer = [d->device newBufferWithBytes:bytes length:length
                                                         options:MTLResourceStorageModeShared];
            return finish_buffer(buffer, length, out, contents, err);
        } @catch (NSException* e) {
            return fail_exception(err, "mts_buffer_new_copy", e);
        } @catch (id other) {
            return fail_unknown_throw(err, "mts_buffer_new_copy");
        }
    }
}

int32_t mts_buffer_wrap(mts_device* d, void* pointer, size_t length, mts_buffer** out, char** err) {
    if (d == NULL || pointer == NULL || out == NULL || length == 0) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_buffer_wrap: NULL argument or zero length");
    }
    *out = NULL;
    size_t page = (size_t)getpagesize();
    if ((uintptr_t)pointer % page != 0 || length % page != 0) {
        return fail_text(err, MTS_ERR_ARGUMENT,
                         "mts_buffer_wrap: the memory must start on a page boundary and span whole pages");
    }
    @autoreleasepool {
        @try {
            id<MTLBuffer> buffer = [d->device newBufferWithBytesNoCopy:pointer length:length
                                                               options:MTLResourceStorageModeShared
                                                           deallocator:nil];
            if (buffer != nil && [buffer length] < length) {   /* virtualised Macs may wrap less than asked */
                char text[160];
                snprintf(text, sizeof text, "Metal wrapped %zu of the %zu bytes asked", (size_t)[buffer length],
                         length);
                [buffer release];
                return fail_text(err, MTS_ERR_ALLOC, text);
            }
            return finish_buffer(buffer, length, out, NULL, err);
        } @catch (NSException* e) {
            return fail_exception(err, "mts_buffer_wrap", e);
        } @catch (id other) {
            return fail_unknown_throw(err, "mts_buffer_wrap");
        }
    }
}

void mts_buffer_release(mts_buffer* buffer) {
    if (buffer == NULL) {
        return;
    }
    @autoreleasepool {
        @try {
            [AS_BUFFER(buffer) release];
        } @catch (id ignored) {
        }
    }
}

/* -- command buffers ------------------------------------------------------------------------------------------ */

int32_t mts_commands_begin(mts_device* d, int32_t flags, mts_commands** out, char** err) {
    if (d == NULL || out == NULL) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_commands_begin: NULL argument");
    }
    *out = NULL;
    @autoreleasepool {
        @try {
            /* when asked, errors report each encoder's execution status, so a fault names the encoder (kernel) it
             * hit; Apple notes that this costs CPU time */
            MTLCommandBufferDescriptor* desc = [[[MTLCommandBufferDescriptor alloc] init] autorelease];
            if (mts_wants_encoder_status(flags)) {
                [desc setErrorOptions:MTLCommandBufferErrorOptionEncoderExecutionStatus];
            }
            id<MTLCommandBuffer> buffer = [d->queue commandBufferWithDescriptor:desc];   /* autoreleased */
            if (buffer == nil) {
                return fail_text(err, MTS_ERR_STATE, "the command queue returned no command buffer");
            }
            mts_commands* c = calloc(1, sizeof *c);
            if (c == NULL) {
                return fail_text(err, MTS_ERR_ALLOC, "out of host memory");
            }
            c->device = d;
            c->buffer = [buffer retain];
            c->nonuniform = d->nonuniform;
            *out = c;
            return MTS_OK;
        } @catch (NSException* e) {
            return fail_exception(err, "mts_commands_begin", e);
        } @catch (id other) {
            return fail_unknown_throw(err, "mts_commands_begin");
        }
    }
}

/* Ends the open encoder, after it updates the fence the next encoder waits for. */
static void end_encoding(mts_commands* c) {
    if (c->encoder != nil) {
        [c->encoder updateFence:c->device->fence];
        c->device->fence_updated = 1;
        [c->encoder endEncoding];
        [c->encoder release];
        c->encoder = nil;
    }
}

int32_t mts_commands_encode(mts_commands* c, mts_pipeline* pipeline, const char* label, int32_t kind,
                            uint32_t size_x, uint32_t size_y, uint32_t size_z,
                            uint32_t threads_x, uint32_t threads_y, uint32_t threads_z,
                            const mts_binding* bindings, uint32_t n_bindings,
                            const uint64_t* threadgroup_memory, uint32_t n_threadgroup_memory, char** err) {
    if (c == NULL || pipeline == NULL || (n_bindings != 0 && bindings == NULL)
        || (n_threadgroup_memory != 0 && threadgroup_memory == NULL)) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_commands_encode: NULL argument");
    }
    if (kind != MTS_DISPATCH_THREADGROUPS && kind != MTS_DISPATCH_THREADS) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_commands_encode: unknown dispatch kind");
    }
    if (c->state != MTS_CB_OPEN) {
        return fail_text(err, MTS_ERR_STATE, "mts_commands_encode: the command buffer is already committed");
    }
    @autoreleasepool {
        @try {
            const uint32_t size[3] = {size_x, size_y, size_z};
            const uint32_t threads[3] = {threads_x, threads_y, threads_z};
            uint64_t lengths[MTS_MAX_BINDINGS] = {0};
            for (uint32_t i = 0; i < n_bindings && i < MTS_MAX_BINDINGS; i++) {
                if (bindings[i].buffer != NULL) {
                    lengths[i] = (uint64_t)[AS_BUFFER(bindings[i].buffer) length];
                }
            }
            const char* problem = mts_encode_problem(
                kind, c->nonuniform, size, threads, (uint64_t)[AS_PIPELINE(pipeline) maxTotalThreadsPerThreadgroup],
                bindings, lengths, n_bindings, n_threadgroup_memory);
            if (problem != NULL) {
                return fail_text(err, MTS_ERR_ARGUMENT, problem);
            }
            const char* name = label != NULL ? label : "";
            if (c->encoder == nil || strncmp(c->label, name, sizeof c->label) != 0) {
                /* one encoder per run of dispatches of one kernel, labelled with it; its dispatches run serially,
                 * and it waits for the fence the encoder before it updated (shim_logic.h) */
                end_encoding(c);
                id<MTLComputeCommandEncoder> encoder =
                    [c->buffer computeCommandEncoderWithDispatchType:MTLDispatchTypeSerial];
                if (encoder == nil) {
                    return fail_text(err, MTS_ERR_STATE, "the command buffer returned no compute encoder");
                }
                c->encoder = [encoder retain];
                c->bound = 0;
                if (mts_encoder_waits(c->device->fence_updated)) {
                    [encoder waitForFence:c->device->fence];
                }
                snprintf(c->label, sizeof c->label, "%s", name);
                NSString* text = utf8_string(c->label);
                if (text != nil) {
                    [encoder setLabel:text];
                }
            }
            id<MTLComputeCommandEncoder> encoder = c->encoder;
            [encoder setComputePipelineState:AS_PIPELINE(pipeline)];
            for (uint32_t i = 0; i < MTS_MAX_BINDINGS; i++) {
                switch (mts_binding_action(bindings, n_bindings, i, &c->bound)) {
                    case MTS_BIND_BUFFER:   /* i < n_bindings */
                        [encoder setBuffer:AS_BUFFER(bindings[i].buffer) offset:(NSUInteger)bindings[i].offset
                                   atIndex:i];
                        break;
                    case MTS_BIND_BYTES:
                        [encoder setBytes:bindings[i].bytes length:(NSUInteger)bindings[i].length atIndex:i];
                        break;
                    case MTS_BIND_CLEAR:   /* the previous dispatch's binding would stay */
                        [encoder setBuffer:nil offset:0 atIndex:i];
                        break;
                    default:
                        break;
                }
            }
            for (uint32_t i = 0; i < n_threadgroup_memory; i++) {
                if (threadgroup_memory[i] != 0) {
                    /* lengths must be multiples of 16 bytes */
                    NSUInteger length = (NSUInteger)((threadgroup_memory[i] + 15u) & ~(uint64_t)15u);
                    [encoder setThreadgroupMemoryLength:length atIndex:i];
                }
            }
            MTLSize grid = MTLSizeMake(size_x, size_y, size_z);
            MTLSize group = MTLSizeMake(threads_x, threads_y, threads_z);
            if (kind == MTS_DISPATCH_THREADS) {
                [encoder dispatchThreads:grid threadsPerThreadgroup:group];
            } else {
                [encoder dispatchThreadgroups:grid threadsPerThreadgroup:group];
            }
            return MTS_OK;
        } @catch (NSException* e) {
            return fail_exception(err, "mts_commands_encode", e);
        } @catch (id other) {
            return fail_unknown_throw(err, "mts_commands_encode");
        }
    }
}

/* A commit threw: the command buffer never runs, so no encoder waits for the fence its encoders were to update. */
static void commit_failed(mts_commands* c) {
    c->state = mts_state_after_commit(0);
    c->device->fence_updated = 0;
}

int32_t mts_commands_commit(mts_commands* c, char** err) {
    if (c == NULL) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_commands_commit: NULL argument");
    }
    if (c->state != MTS_CB_OPEN) {
        return fail_text(err, MTS_ERR_STATE, "mts_commands_commit: already committed");
    }
    @autoreleasepool {
        @try {
            end_encoding(c);
            [c->buffer commit];
            c->state = mts_state_after_commit(1);   /* committed only once commit returned */
            return MTS_OK;
        } @catch (NSException* e) {
            commit_failed(c);
            return fail_exception(err, "mts_commands_commit", e);
        } @catch (id other) {
            commit_failed(c);
            return fail_unknown_throw(err, "mts_commands_commit");
        }
    }
}

/* The label of the encoder whose execution faulted, from the error's encoder infos ("" when none says so). */
static void faulted_encoder(NSError* error, char* out, size_t size) {
    out[0] = '\0';
    NSArray* infos = error != nil ? [[error userInfo] objectForKey:MTLCommandBufferEncoderInfoErrorKey] : nil;
    for (id<MTLCommandBufferEncoderInfo> info in infos) {
        if ([info errorState] == MTLCommandEncoderErrorStateFaulted) {
            const char* label = [[info label] UTF8String];
            snprintf(out, size, "%s", label != NULL ? label : "");
            return;
        }
    }
}

int32_t mts_commands_wait(mts_commands* c, mts_completion* done, char** err) {
    if (c == NULL || done == NULL) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_commands_wait: NULL argument");
    }
    memset(done, 0, sizeof *done);
    if (!mts_may_wait(c->state)) {
        return fail_text(err, MTS_ERR_STATE, "mts_commands_wait: the command buffer was not committed");
    }
    @autoreleasepool {
        @try {
            id<MTLCommandBuffer> buffer = c->buffer;
            [buffer waitUntilCompleted];
            c->waited = 1;
            MTLCommandBufferStatus status = [buffer status];
            done->status = (int32_t)status;
            done->gpu_start = (double)[buffer GPUStartTime];
            done->gpu_end = (double)[buffer GPUEndTime];
            if (status == MTLCommandBufferStatusError) {
                NSError* error = [buffer error];
                done->error_code = error != nil ? (int32_t)[error code] : 0;
                faulted_encoder(error, done->faulted, sizeof done->faulted);
                return fail_error(err, MTS_ERR_GPU, @"the command buffer failed", error);
            }
            return MTS_OK;
        } @catch (NSException* e) {
            return fail_exception(err, "mts_commands_wait", e);
        } @catch (id other) {
            return fail_unknown_throw(err, "mts_commands_wait");
        }
    }
}

void mts_commands_release(mts_commands* c) {
    if (c == NULL) {
        return;
    }
    @autoreleasepool {
        @try {
            if (c->state == MTS_CB_OPEN) {   /* encoded work is never dropped: committed now */
                @try {
                    end_encoding(c);
                    [c->buffer commit];
                    c->state = mts_state_after_commit(1);
                } @catch (id failed) {
                    commit_failed(c);
                }
            }
            if (mts_may_wait(c->state) && !c->waited) {   /* the GPU may still use memory freed after this */
                [c->buffer waitUntilCompleted];
                c->waited = 1;
            }
            if (c->encoder != nil) {   /* a commit that threw may leave it open */
                [c->encoder release];
                c->encoder = nil;
            }
            [c->buffer release];
        } @catch (id ignored) {
        }
    }
    free(c);
}
