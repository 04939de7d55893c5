/* A C stand-in for metile's Metal shim (metile/metal/gpu/shim.h), for machines without Metal.
 *
 * It implements every entry point of shim.h with host memory, records each call in a log, counts
 * handles by kind (so tests can check that each one is released exactly once), can be told to fail
 * any entry point with a given code and message, and on mts_commands_wait hands each recorded
 * dispatch to an executor callback (the tests run it with numpy or with metile's CPU device).
 * Without an executor, dispatches are only logged and counted, which keeps the stand-in cheap.
 *
 * Like Metal, a command buffer keeps the buffers it binds alive until it is released, so the caller
 * may release a buffer handle while a dispatch that uses it is in flight. Where the tests rely on it, it
 * also behaves as Metal on Apple silicon does: 16 KiB pages, no-copy wraps that can fail or come back short,
 * threadgroup memory rounded up to 16 bytes, an argument table per encoder whose entries a dispatch does not
 * set keep the previous dispatch's, encoders that run in any order unless one waits for a fence another
 * updated or they share only tracked memory (a buffer marked untracked, as MLX allocates them, is not ordered
 * otherwise: the stand-in then runs the later encoder first), a wait for a command buffer whose commit threw
 * (which never returns on Metal: counted), and the system's default device, device count and macOS version.
 * What shim.m decides about all this it decides with the functions of shim_logic.h, which the stand-in calls
 * too: the tests exercise those decisions, not a copy of them.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shim.h"
#include "shim_logic.h"
#include "stub_controls.h"

enum { K_DEVICE, K_LIBRARY, K_PIPELINE, K_BUFFER, K_COMMANDS, K_COUNT };
static const char* const KIND_NAMES[K_COUNT] = {"device", "library", "pipeline", "buffer", "commands"};
#define MAGIC 0x6d747362u

typedef struct handle {
    uint32_t magic;
    int32_t kind;
    int32_t released;            /* released by the caller (the memory stays, to catch double releases) */
    int64_t id;
} handle;

struct mts_device { handle h; int32_t nonuniform; int32_t fence_updated; };
struct mts_library { handle h; char* source; };
struct mts_pipeline { handle h; char* source; char* function; mts_pipeline_info info; };
struct mts_buffer { handle h; int32_t refs; int32_t owned; void* data; size_t length; int32_t untracked; };

/* An entry of an encoder's argument table, as Metal keeps it between dispatches. */
typedef struct entry { mts_buffer* buffer; uint64_t offset; void* bytes; uint64_t length; } entry;

typedef struct record {
    char* source;
    char* function;
    int32_t kind;
    uint32_t size[3], threads[3];
    uint32_t n_bindings, n_tg;
    mts_buffer** buffers;        /* retained */
    uint64_t* offsets;
    void** bytes;                /* setBytes copies */
    uint64_t* lengths;
    uint64_t* tg;
    char label[256];             /* the encoder's label: the kernel it was encoded for */
    size_t encoder;              /* its encoder (0, 1, ... in the command buffer) */
    int32_t waits;               /* its encoder waited for the fence the encoder before it updated */
} record;

struct mts_commands {
    handle h;
    mts_device* device;
    int32_t state;               /* MTS_CB_OPEN, MTS_CB_COMMITTED, MTS_CB_COMMIT_FAILED (shim_logic.h) */
    int32_t waited;
    int32_t waits;               /* the open encoder waited for the fence */
    uint32_t bound;              /* the entries the open encoder has set (shim_logic.h) */
    entry table[MTS_MAX_BINDINGS];   /* the open encoder's argument table, as Metal keeps it */
    record* records;             /* kept only while an executor is set */
    size_t n_records, cap_records;
    size_t n_dispatches;
    size_t n_encoders;           /* encoders opened: one per run of dispatches of one label */
    int32_t encoder_open;        /* an encoder is open (not yet ended by a new label or the commit) */
    int32_t encoder_status;      /* errors report each encoder's execution status (which one faulted) */
    int32_t metal_committed;     /* what Metal knows: its commit returned (shim.m's view is `state`) */
    char label[256];             /* the open encoder's label */
    int32_t nonuniform;
};

typedef struct failure {
    char entry[64];
    int32_t skip, code, detail;
    char message[2048];
    int32_t armed;
} failure;

static int64_t g_created[K_COUNT], g_released[K_COUNT], g_bad_releases, g_next_id = 1, g_buffers_in_memory;
static int32_t g_logging = 1;
static char* g_log;
static size_t g_log_len, g_log_cap;
static failure g_failures[16];
static mts_stub_executor g_executor;
static mts_device_info g_info;
static mts_pipeline_info g_pipeline_info;
static int32_t g_wrap_mode, g_os_major, g_default_device = 1, g_metal4_family, g_tensor_probe, g_devices = 1;
static int64_t g_hangs;
static char g_compile_warnings[2048];

/* -- helpers ---------------------------------------------------------------------------------------- */

static void log_line(const char* fmt, ...) {
    if (!g_logging) {
        return;
    }
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0) {
        return;
    }
    size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    if (g_log_len + len + 2 > g_log_cap) {
        size_t cap = g_log_cap ? g_log_cap * 2 : 4096;
        while (cap < g_log_len + len + 2) {
            cap *= 2;
        }
        char* grown = realloc(g_log, cap);
        if (grown == NULL) {
            return;
        }
        g_log = grown;
        g_log_cap = cap;
    }
    memcpy(g_log + g_log_len, line, len);
    g_log_len += len;
    g_log[g_log_len++] = '\n';
    g_log[g_log_len] = '\0';
}

static int32_t fail_text(char** err, int32_t code, const char* text) {
    if (err != NULL) {
        *err = strdup(text);
    }
    return code;
}

/* An injected failure for `entry`, if one is due: returns its code (and detail), else MTS_OK. */
static int32_t injected(const char* entry, char** err, int32_t* detail) {
    for (size_t i = 0; i < sizeof g_failures / sizeof g_failures[0]; i++) {
        failure* f = &g_failures[i];
        if (!f->armed || strcmp(f->entry, entry) != 0) {
            continue;
        }
        if (f->skip > 0) {
            f->skip--;
            continue;
        }
        f->armed = 0;
        if (detail != NULL) {
            *detail = f->detail;
        }
        log_line("%s failed code=%d", entry, f->code);
        return fail_text(err, f->code, f->message);
    }
    return MTS_OK;
}

static void* new_handle(size_t size, int32_t kind) {
    handle* h = calloc(1, size);
    if (h == NULL) {
        return NULL;
    }
    h->magic = MAGIC;
    h->kind = kind;
    h->id = g_next_id++;
    g_created[kind]++;
    return h;
}

/* Marks a handle released by the caller; returns 0 if it was already released (or is not a handle). */
static int release_handle(handle* h, int32_t kind) {
    if (h->magic != MAGIC || h->kind != kind || h->released) {
        g_bad_releases++;
        return 0;
    }
    h->released = 1;
    g_released[kind]++;
    return 1;
}

static int live_handle(const void* p, int32_t kind) {
    const handle* h = p;
    return h != NULL && h->magic == MAGIC && h->kind == kind && !h->released;
}

static void buffer_unref(mts_buffer* b) {
    if (--b->refs == 0) {
        if (b->owned) {
            free(b->data);
        }
        b->data = NULL;
        g_buffers_in_memory--;
    }
}

static int kind_index(const char* kind) {
    for (int k = 0; k < K_COUNT; k++) {
        if (strcmp(kind, KIND_NAMES[k]) == 0) {
            return k;
        }
    }
    return -1;
}

static int is_ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* Whether `source` declares a kernel called `name`: the identifier followed by "(" with the word
 * "kernel" between it and the previous ';' or '}'. */
/* `[[host_name("name")]]` names a kernel (an instantiation of a kernel template) */
static int has_host_name(const char* source, const char* name) {
    size_t n = strlen(name);
    for (const char* p = strstr(source, name); p != NULL; p = strstr(p + 1, name)) {
        if (p == source || p[-1] != '"' || p[n] != '"') {
            continue;
        }
        const char* q = p - 1;
        while (q > source && (q[-1] == ' ' || q[-1] == '\t' || q[-1] == '\n')) {
            q--;
        }
        if (q == source || q[-1] != '(') {
            continue;
        }
        q--;
        while (q > source && (q[-1] == ' ' || q[-1] == '\t')) {
            q--;
        }
        if (q - source >= 9 && strncmp(q - 9, "host_name", 9) == 0) {
            return 1;
        }
    }
    return 0;
}

static int has_kernel(const char* source, const char* name) {
    size_t n = strlen(name);
    if (has_host_name(source, name)) {
        return 1;
    }
    for (const char* p = strstr(source, name); p != NULL; p = strstr(p + 1, name)) {
        if ((p > source && is_ident_char(p[-1])) || is_ident_char(p[n])) {
            continue;
        }
        const char* q = p + n;
        while (*q == ' ' || *q == '\t' || *q == '\n') {
            q++;
        }
        if (*q != '(') {
            continue;
        }
        const char* start = p;
        while (start > source && start[-1] != ';' && start[-1] != '}') {
            start--;
        }
        for (const char* k = strstr(start, "kernel"); k != NULL && k < p; k = strstr(k + 1, "kernel")) {
            if ((k == source || !is_ident_char(k[-1])) && !is_ident_char(k[6])) {
                return 1;
            }
        }
    }
    return 0;
}

static void free_records(mts_commands* c) {
    for (size_t i = 0; i < c->n_records; i++) {
        record* r = &c->records[i];
        for (uint32_t j = 0; j < r->n_bindings; j++) {
            if (r->buffers[j] != NULL) {
                buffer_unref(r->buffers[j]);
            }
            free(r->bytes[j]);
        }
        free(r->source);
        free(r->function);
        free(r->buffers);
        free(r->offsets);
        free(r->bytes);
        free(r->lengths);
        free(r->tg);
    }
    free(c->records);
    c->records = NULL;
    c->n_records = c->cap_records = 0;
}

/* -- controls ---------------------------------------------------------------------------------------- */

void mts_stub_reset(void) {
    memset(g_failures, 0, sizeof g_failures);
    g_executor = NULL;
    g_logging = 1;
    g_log_len = 0;
    if (g_log != NULL) {
        g_log[0] = '\0';
    }
    memset(&g_info, 0, sizeof g_info);
    snprintf(g_info.name, sizeof g_info.name, "%s", "metile stub GPU (Apple M2)");
    g_info.apple_family = 8;
    g_info.max_threads_per_threadgroup[0] = 1024;
    g_info.max_threads_per_threadgroup[1] = 1024;
    g_info.max_threads_per_threadgroup[2] = 1024;
    g_info.max_threadgroup_memory = 32768;
    g_info.recommended_working_set = (uint64_t)16 << 30;
    g_info.has_unified_memory = 1;
    g_info.nonuniform_threadgroups = 1;
    g_wrap_mode = g_os_major = g_metal4_family = g_tensor_probe = 0;
    g_default_device = g_devices = 1;
    g_hangs = 0;
    g_compile_warnings[0] = '\0';
    g_pipeline_info.max_total_threads_per_threadgroup = 1024;
    g_pipeline_info.thread_execution_width = 32;
    g_pipeline_info.static_threadgroup_memory = 0;
}

void mts_stub_set_device_info(const mts_device_info* info) {
    g_info = *info;
}

void mts_stub_set_pipeline_info(const mts_pipeline_info* info) {
    g_pipeline_info = *info;
}

void mts_stub_set_logging(int32_t on) {
    g_logging = on;
}

const char* mts_stub_log(void) {
    return g_log != NULL ? g_log : "";
}

void mts_stub_clear_log(void) {
    g_log_len = 0;
    if (g_log != NULL) {
        g_log[0] = '\0';
    }
}

int64_t mts_stub_created(const char* kind) {
    int k = kind_index(kind);
    return k < 0 ? -1 : g_created[k];
}

int64_t mts_stub_live(const char* kind) {
    int k = kind_index(kind);
    return k < 0 ? -1 : g_created[k] - g_released[k];
}

int64_t mts_stub_bad_releases(void) {
    return g_bad_releases;
}

int64_t mts_stub_buffers_in_memory(void) {
    return g_buffers_in_memory;
}

void mts_stub_fail(const char* entry, int32_t skip, int32_t code, int32_t detail, const char* message) {
    for (size_t i = 0; i < sizeof g_failures / sizeof g_failures[0]; i++) {
        failure* f = &g_failures[i];
        if (!f->armed) {
            snprintf(f->entry, sizeof f->entry, "%s", entry);
            snprintf(f->message, sizeof f->message, "%s", message);
            f->skip = skip;
            f->code = code;
            f->detail = detail;
            f->armed = 1;
            return;
        }
    }
}

void mts_stub_set_executor(mts_stub_executor executor) {
    g_executor = executor;
}

void mts_stub_set_wrap(int32_t mode) {
    g_wrap_mode = mode;
}

void mts_stub_set_system(int32_t os_major, int32_t default_device, int32_t metal4_family, int32_t tensor_probe) {
    g_os_major = os_major;
    g_default_device = default_device;
    g_metal4_family = metal4_family;
    g_tensor_probe = tensor_probe;
}

void mts_stub_set_devices(int32_t n) {
    g_devices = n;
}

void mts_stub_set_untracked(mts_buffer* b, int32_t untracked) {
    b->untracked = untracked;
}

int64_t mts_stub_hangs(void) {
    return g_hangs;
}

void mts_stub_set_tensor_probe(int32_t compiles) {
    g_tensor_probe = compiles;
}

void mts_stub_set_compile_warnings(const char* text) {
    snprintf(g_compile_warnings, sizeof g_compile_warnings, "%s", text != NULL ? text : "");
}

/* -- shim.h: process-wide ------------------------------------------------------------------------------ */

uint32_t mts_abi_version(void) {
    return MTS_ABI_VERSION;
}

void mts_string_free(char* s) {
    free(s);
}

size_t mts_page_size(void) {
    return 16384;   /* Apple silicon's pages */
}

/* -- device ---------------------------------------------------------------------------------------------- */

int32_t mts_device_create(mts_device** out, char** err) {
    if (g_info.name[0] == '\0') {
        mts_stub_reset();
    }
    *out = NULL;
    int32_t code = injected("device_create", err, NULL);
    if (code != MTS_OK) {
        return code;
    }
    int source = mts_choose_device(g_default_device, (size_t)g_devices);
    if (source == MTS_DEVICE_NONE) {
        return fail_text(err, MTS_ERR_NO_DEVICE,
                         "neither MTLCreateSystemDefaultDevice nor MTLCopyAllDevices found a Metal device");
    }
    mts_device* d = new_handle(sizeof *d, K_DEVICE);
    d->nonuniform = g_info.nonuniform_threadgroups;
    log_line("device_create device=%lld%s", (long long)d->h.id,
             source == MTS_DEVICE_FIRST_OF_ALL ? " fallback=all_devices" : "");
    *out = d;
    return MTS_OK;
}

void mts_device_release(mts_device* d) {
    if (d != NULL && release_handle(&d->h, K_DEVICE)) {
        log_line("device_release device=%lld", (long long)d->h.id);
    }
}

int32_t mts_device_query(mts_device* d, mts_device_info* info, char** err) {
    if (!live_handle(d, K_DEVICE) || info == NULL) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_device_query: not a live device");
    }
    int32_t code = injected("device_query", err, NULL);
    if (code != MTS_OK) {
        return code;
    }
    log_line("device_query device=%lld", (long long)d->h.id);
    *info = g_info;
    if (g_os_major != 0) {   /* the system's answer, when shim.m asks it */
        info->supports_metal4 = mts_has_metal4(mts_macos_major(g_os_major)) && g_metal4_family;
    }
    return MTS_OK;
}

int32_t mts_device_probe_tensor_ops(mts_device* d, int32_t* compiles, char** err) {
    if (!live_handle(d, K_DEVICE) || compiles == NULL) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_device_probe_tensor_ops: not a live device");
    }
    *compiles = 0;
    int32_t code = injected("device_probe_tensor_ops", err, NULL);
    if (code != MTS_OK) {
        return code;
    }
    log_line("device_probe_tensor_ops device=%lld", (long long)d->h.id);
    /* compiled where shim.m compiles it (any system when it is not modelled) */
    *compiles = (g_os_major == 0 || mts_has_metal4(mts_macos_major(g_os_major))) && g_tensor_probe;
    return MTS_OK;
}

/* -- libraries and pipelines -------------------------------------------------------------------------------- */

static mts_library* new_library(char* source) {
    mts_library* lib = new_handle(sizeof *lib, K_LIBRARY);
    lib->source = source;
    return lib;
}

int32_t mts_library_from_source(mts_device* d, const char* source, const mts_compile_options* options,
                                mts_library** out, char** warnings, char** err) {
    if (!live_handle(d, K_DEVICE) || source == NULL || out == NULL) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_library_from_source: bad argument");
    }
    *out = NULL;
    if (warnings != NULL) {
        *warnings = NULL;
    }
    int32_t code = injected("library_from_source", err, NULL);
    if (code != MTS_OK) {
        return code;
    }
    mts_library* lib = new_library(strdup(source));
    /* the setter shim.m uses on the system (the newest when it is not modelled) */
    log_line("library_from_source library=%lld language_version=%u fast_math=%d math=%s bytes=%zu",
             (long long)lib->h.id, options ? options->language_version : 0u, options ? options->fast_math : -1,
             g_os_major == 0 || mts_uses_math_mode(mts_macos_major(g_os_major)) ? "mathMode" : "fastMathEnabled",
             strlen(source));
    if (warnings != NULL && g_compile_warnings[0] != '\0') {
        *warnings = strdup(g_compile_warnings);
    }
    *out = lib;
    return MTS_OK;
}

int32_t mts_library_from_file(mts_device* d, const char* path, mts_library** out, char** err) {
    if (!live_handle(d, K_DEVICE) || path == NULL || out == NULL) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_library_from_file: bad argument");
    }
    *out = NULL;
    int32_t code = injected("library_from_file", err, NULL);
    if (code != MTS_OK) {
        return code;
    }
    FILE* f = fopen(path, "rb");
    if (f == NULL) {
        char text[1200];
        snprintf(text, sizeof text, "cannot load %s: no such file", path);
        return fail_text(err, MTS_ERR_LOAD, text);
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* text = calloc(1, (size_t)(size > 0 ? size : 0) + 1);
    size_t got = size > 0 ? fread(text, 1, (size_t)size, f) : 0;
    fclose(f);
    text[got] = '\0';
    mts_library* lib = new_library(text);
    log_line("library_from_file library=%lld path=%s", (long long)lib->h.id, path);
    *out = lib;
    return MTS_OK;
}

void mts_library_release(mts_library* lib) {
    if (lib != NULL && release_handle(&lib->h, K_LIBRARY)) {
        log_line("library_release library=%lld", (long long)lib->h.id);
        free(lib->source);
        lib->source = NULL;
    }
}

static int32_t create_pipeline(mts_device* d, mts_library* lib, const char* function_name, const char* entry,
                               const char* constants_text, mts_pipeline** out, mts_pipeline_info* info, char** err) {
    if (!live_handle(d, K_DEVICE) || !live_handle(lib, K_LIBRARY) || function_name == NULL || out == NULL
        || info == NULL) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_pipeline_create: bad argument");
    }
    *out = NULL;
    int32_t code = injected(entry, err, NULL);
    if (code != MTS_OK) {
        return code;
    }
    if (!has_kernel(lib->source, function_name)) {
        char text[512];
        snprintf(text, sizeof text, "the library has no function named '%s'", function_name);
        return fail_text(err, MTS_ERR_NOT_FOUND, text);
    }
    mts_pipeline* p = new_handle(sizeof *p, K_PIPELINE);
    p->source = strdup(lib->source);
    p->function = strdup(function_name);
    p->info = g_pipeline_info;
    *info = p->info;
    log_line("%s pipeline=%lld library=%lld function=%s%s", entry, (long long)p->h.id, (long long)lib->h.id,
             function_name, constants_text);
    *out = p;
    return MTS_OK;
}

int32_t mts_pipeline_create(mts_device* d, mts_library* lib, const char* function_name, mts_pipeline** out,
                            mts_pipeline_info* info, char** err) {
    return create_pipeline(d, lib, function_name, "pipeline_create", "", out, info, err);
}

/* Logs each constant as ` constant=<name or #index>:<MTLDataType>:<value bytes in hex>`. */
int32_t mts_pipeline_create_specialized(mts_device* d, mts_library* lib, const char* function_name,
                                        const mts_constant* constants, uint32_t n_constants, mts_pipeline** out,
                                        mts_pipeline_info* info, char** err) {
    if (n_constants > 0 && constants == NULL) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_pipeline_create_specialized: NULL constants");
    }
    size_t cap = 64 + (size_t)n_constants * 400;
    char* text = malloc(cap);
    size_t used = 0;
    text[0] = 0;
    for (uint32_t i = 0; i < n_constants; ++i) {
        const mts_constant* c = &constants[i];
        if (c->name != NULL) {
            used += (size_t)snprintf(text + used, cap - used, " constant=%.200s:%u:", c->name, c->data_type);
        } else {
            used += (size_t)snprintf(text + used, cap - used, " constant=#%u:%u:", c->index, c->data_type);
        }
        for (size_t b = 0; b < sizeof c->value; ++b) {
            used += (size_t)snprintf(text + used, cap - used, "%02x", c->value[b]);
        }
    }
    int32_t code = create_pipeline(d, lib, function_name, "pipeline_create_specialized", text, out, info, err);
    free(text);
    return code;
}

void mts_pipeline_release(mts_pipeline* p) {
    if (p != NULL && release_handle(&p->h, K_PIPELINE)) {
        log_line("pipeline_release pipeline=%lld function=%s", (long long)p->h.id, p->function);
        free(p->source);
        free(p->function);
        p->source = p->function = NULL;
    }
}

/* -- buffers -------------------------------------------------------------------------------------------------- */

static mts_buffer* new_buffer(void* data, size_t length, int32_t owned) {
    mts_buffer* b = new_handle(sizeof *b, K_BUFFER);
    b->refs = 1;
    b->owned = owned;
    b->data = data;
    b->length = length;
    g_buffers_in_memory++;
    return b;
}

static void* page_alloc(size_t length) {
    void* data = NULL;
    size_t page = mts_page_size();
    if (posix_memalign(&data, page, (length + page - 1) / page * page) != 0) {
        return NULL;
    }
    memset(data, 0, length);
    return data;
}

int32_t mts_buffer_new(mts_device* d, size_t length, mts_buffer** out, void** contents, char** err) {
    if (!live_handle(d, K_DEVICE) || out == NULL || length == 0) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_buffer_new: bad argument or zero length");
    }
    *out = NULL;
    int32_t code = injected("buffer_new", err, NULL);
    if (code != MTS_OK) {
        return code;
    }
    void* data = page_alloc(length);
    if (data == NULL) {
        return fail_text(err, MTS_ERR_ALLOC, "cannot allocate a Metal buffer");
    }
    mts_buffer* b = new_buffer(data, length, 1);
    log_line("buffer_new buffer=%lld length=%zu", (long long)b->h.id, length);
    if (contents != NULL) {
        *contents = data;
    }
    *out = b;
    return MTS_OK;
}

int32_t mts_buffer_new_copy(mts_device* d, const void* bytes, size_t length, mts_buffer** out, void** contents,
                            char** err) {
    if (!live_handle(d, K_DEVICE) || bytes == NULL || out == NULL || length == 0) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_buffer_new_copy: bad argument or zero length");
    }
    *out = NULL;
    int32_t code = injected("buffer_new_copy", err, NULL);
    if (code != MTS_OK) {
        return code;
    }
    void* data = page_alloc(length);
    if (data == NULL) {
        return fail_text(err, MTS_ERR_ALLOC, "cannot allocate a Metal buffer");
    }
    memcpy(data, bytes, length);
    mts_buffer* b = new_buffer(data, length, 1);
    log_line("buffer_new_copy buffer=%lld length=%zu", (long long)b->h.id, length);
    if (contents != NULL) {
        *contents = data;
    }
    *out = b;
    return MTS_OK;
}

int32_t mts_buffer_wrap(mts_device* d, void* pointer, size_t length, mts_buffer** out, char** err) {
    if (!live_handle(d, K_DEVICE) || pointer == NULL || out == NULL || length == 0) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_buffer_wrap: bad argument or zero length");
    }
    *out = NULL;
    size_t page = mts_page_size();
    if ((uintptr_t)pointer % page != 0 || length % page != 0) {
        return fail_text(err, MTS_ERR_ARGUMENT,
                         "mts_buffer_wrap: the memory must start on a page boundary and span whole pages");
    }
    int32_t code = injected("buffer_wrap", err, NULL);
    if (code != MTS_OK) {
        return code;
    }
    if (g_wrap_mode == 1) {
        log_line("buffer_wrap refused=nil length=%zu", length);
        return fail_text(err, MTS_ERR_ALLOC, "cannot allocate a Metal buffer: newBufferWithBytesNoCopy returned nil");
    }
    if (g_wrap_mode == 2) {   /* as shim.m: a buffer shorter than asked is refused */
        char text[160];
        snprintf(text, sizeof text, "Metal wrapped %zu of the %zu bytes asked", length - page, length);
        log_line("buffer_wrap refused=short length=%zu", length);
        return fail_text(err, MTS_ERR_ALLOC, text);
    }
    mts_buffer* b = new_buffer(pointer, length, 0);
    log_line("buffer_wrap buffer=%lld length=%zu", (long long)b->h.id, length);
    *out = b;
    return MTS_OK;
}

void mts_buffer_release(mts_buffer* b) {
    if (b != NULL && release_handle(&b->h, K_BUFFER)) {
        log_line("buffer_release buffer=%lld", (long long)b->h.id);
        buffer_unref(b);
    }
}

/* -- command buffers ------------------------------------------------------------------------------------------- */

int32_t mts_commands_begin(mts_device* d, int32_t flags, mts_commands** out, char** err) {
    if (!live_handle(d, K_DEVICE) || out == NULL) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_commands_begin: bad argument");
    }
    *out = NULL;
    int32_t code = injected("commands_begin", err, NULL);
    if (code != MTS_OK) {
        return code;
    }
    mts_commands* c = new_handle(sizeof *c, K_COMMANDS);
    c->device = d;
    c->nonuniform = d->nonuniform;
    c->encoder_status = mts_wants_encoder_status(flags);
    log_line("commands_begin commands=%lld error_options=%s", (long long)c->h.id,
             c->encoder_status ? "encoder_execution_status" : "none");
    *out = c;
    return MTS_OK;
}

/* Ends the open encoder, which updates the device's fence (as shim.m's end_encoding). */
static void end_encoding(mts_commands* c) {
    if (c->n_encoders > 0 && c->encoder_open) {
        c->device->fence_updated = 1;
        c->encoder_open = 0;
    }
}

int32_t mts_commands_encode(mts_commands* c, mts_pipeline* pipeline, const char* label, int32_t kind,
                            uint32_t size_x, uint32_t size_y, uint32_t size_z,
                            uint32_t threads_x, uint32_t threads_y, uint32_t threads_z,
                            const mts_binding* bindings, uint32_t n_bindings,
                            const uint64_t* threadgroup_memory, uint32_t n_threadgroup_memory, char** err) {
    if (!live_handle(c, K_COMMANDS) || !live_handle(pipeline, K_PIPELINE) || (n_bindings && bindings == NULL)
        || (n_threadgroup_memory && threadgroup_memory == NULL)) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_commands_encode: bad argument");
    }
    if (kind != MTS_DISPATCH_THREADGROUPS && kind != MTS_DISPATCH_THREADS) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_commands_encode: unknown dispatch kind");
    }
    if (c->state != MTS_CB_OPEN) {
        return fail_text(err, MTS_ERR_STATE, "mts_commands_encode: the command buffer is already committed");
    }
    uint64_t lengths[MTS_MAX_BINDINGS] = {0};
    for (uint32_t i = 0; i < n_bindings && i < MTS_MAX_BINDINGS; i++) {
        if (bindings[i].buffer != NULL) {
            if (!live_handle(bindings[i].buffer, K_BUFFER)) {
                return fail_text(err, MTS_ERR_ARGUMENT, "mts_commands_encode: a bound buffer was released");
            }
            lengths[i] = bindings[i].buffer->length;
        }
    }
    const uint32_t size[3] = {size_x, size_y, size_z};
    const uint32_t threads[3] = {threads_x, threads_y, threads_z};
    const char* problem = mts_encode_problem(kind, c->nonuniform, size, threads,
                                             pipeline->info.max_total_threads_per_threadgroup, bindings, lengths,
                                             n_bindings, n_threadgroup_memory);
    if (problem != NULL) {
        return fail_text(err, MTS_ERR_ARGUMENT, problem);
    }
    int32_t code = injected("commands_encode", err, NULL);
    if (code != MTS_OK) {
        return code;
    }
    const char* name = label != NULL ? label : "";
    if (!c->encoder_open || strncmp(c->label, name, sizeof c->label) != 0) {   /* a new labelled encoder */
        end_encoding(c);
        c->n_encoders++;
        c->encoder_open = 1;
        snprintf(c->label, sizeof c->label, "%s", name);
        c->waits = mts_encoder_waits(c->device->fence_updated);
        c->bound = 0;
        memset(c->table, 0, sizeof c->table);   /* a new encoder's argument table is empty */
    }
    uint32_t n_table = 0;   /* entries of the table the dispatch sees: up to the last one set */
    for (uint32_t i = 0; i < MTS_MAX_BINDINGS; i++) {
        entry* e = &c->table[i];
        switch (mts_binding_action(bindings, n_bindings, i, &c->bound)) {
            case MTS_BIND_BUFFER:
                e->buffer = bindings[i].buffer, e->offset = bindings[i].offset, e->bytes = NULL;
                e->length = bindings[i].buffer->length - bindings[i].offset;
                break;
            case MTS_BIND_BYTES:
                e->buffer = NULL, e->bytes = (void*)bindings[i].bytes, e->length = bindings[i].length;
                break;
            case MTS_BIND_CLEAR:
                memset(e, 0, sizeof *e);
                break;
            default:   /* Metal keeps what the previous dispatch of this encoder set */
                break;
        }
        if (e->buffer != NULL || e->bytes != NULL || i < n_bindings) {
            n_table = i + 1;
        }
    }
    log_line("commands_encode commands=%lld function=%s kind=%s size=%u,%u,%u threads=%u,%u,%u fence_wait=%d "
             "bindings=%u tg=%u encoder=%zu label=%s",
             (long long)c->h.id, pipeline->function, kind == MTS_DISPATCH_THREADS ? "threads" : "threadgroups",
             size_x, size_y, size_z, threads_x, threads_y, threads_z, c->waits, n_bindings, n_threadgroup_memory,
             c->n_encoders, c->label);
    c->n_dispatches++;
    if (g_executor == NULL) {
        return MTS_OK;   /* nothing will replay it: count it only (keeps the stand-in cheap for benchmarks) */
    }
    if (c->n_records == c->cap_records) {
        size_t cap = c->cap_records ? c->cap_records * 2 : 16;
        record* grown = realloc(c->records, cap * sizeof *grown);
        if (grown == NULL) {
            return fail_text(err, MTS_ERR_ALLOC, "out of host memory");
        }
        c->records = grown;
        c->cap_records = cap;
    }
    record* r = &c->records[c->n_records++];
    memset(r, 0, sizeof *r);
    r->source = strdup(pipeline->source);
    r->function = strdup(pipeline->function);
    r->kind = kind;
    r->size[0] = size_x, r->size[1] = size_y, r->size[2] = size_z;
    r->threads[0] = threads_x, r->threads[1] = threads_y, r->threads[2] = threads_z;
    r->n_bindings = n_table;
    r->buffers = calloc(n_table + 1, sizeof *r->buffers);
    r->offsets = calloc(n_table + 1, sizeof *r->offsets);
    r->bytes = calloc(n_table + 1, sizeof *r->bytes);
    r->lengths = calloc(n_table + 1, sizeof *r->lengths);
    for (uint32_t i = 0; i < n_table; i++) {   /* what the dispatch sees: the encoder's table */
        const entry* e = &c->table[i];
        if (e->buffer != NULL) {
            r->buffers[i] = e->buffer;
            e->buffer->refs++;   /* like Metal, the command buffer keeps what it binds alive */
            r->offsets[i] = e->offset;
            r->lengths[i] = e->length;
        } else if (e->bytes != NULL) {
            r->bytes[i] = malloc(e->length);
            memcpy(r->bytes[i], e->bytes, e->length);   /* setBytes copies at encode time */
            r->lengths[i] = e->length;
            c->table[i].bytes = r->bytes[i];            /* kept by the table as Metal keeps its copy */
        }
    }
    r->n_tg = n_threadgroup_memory;
    r->tg = calloc(n_threadgroup_memory + 1, sizeof *r->tg);
    for (uint32_t i = 0; i < n_threadgroup_memory; i++) {   /* as shim.m: Metal takes multiples of 16 bytes */
        r->tg[i] = (threadgroup_memory[i] + 15u) & ~(uint64_t)15u;
    }
    snprintf(r->label, sizeof r->label, "%s", c->label);
    r->encoder = c->n_encoders - 1;
    r->waits = c->waits;
    return MTS_OK;
}

/* Commits: a failure injected with MTS_ERR_EXCEPTION is a commit that threw (shim.m then notes it as not committed,
 * and the next encoder waits for no fence); any other code fails before the commit is tried. */
static int32_t commit(mts_commands* c, char** err) {
    int32_t code = injected("commands_commit", err, NULL);
    if (code == MTS_ERR_EXCEPTION) {   /* Metal did not commit it */
        end_encoding(c);
        c->state = mts_state_after_commit(0);
        c->device->fence_updated = 0;
        return code;
    }
    if (code != MTS_OK) {
        return code;
    }
    end_encoding(c);
    c->metal_committed = 1;
    c->state = mts_state_after_commit(1);
    return MTS_OK;
}

/* Whether waiting for `c` as shim.m decides would never return: it waits for a command buffer Metal never committed. */
static int hangs(mts_commands* c) {
    if (mts_may_wait(c->state) && !c->metal_committed) {
        g_hangs++;
        log_line("commands_hang commands=%lld", (long long)c->h.id);
        return 1;
    }
    return 0;
}

int32_t mts_commands_commit(mts_commands* c, char** err) {
    if (!live_handle(c, K_COMMANDS)) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_commands_commit: not a live command buffer");
    }
    if (c->state != MTS_CB_OPEN) {
        return fail_text(err, MTS_ERR_STATE, "mts_commands_commit: already committed");
    }
    int32_t code = commit(c, err);
    log_line("commands_commit commands=%lld dispatches=%zu%s", (long long)c->h.id, c->n_dispatches,
             code == MTS_OK ? "" : " failed");
    return code;
}

/* Whether the encoders e1 < e2 share a buffer Metal does not track (whose accesses nothing but a fence orders). */
static int share_untracked(const mts_commands* c, size_t e1, size_t e2) {
    for (size_t i = 0; i < c->n_records; i++) {
        const record* a = &c->records[i];
        if (a->encoder != e1) {
            continue;
        }
        for (size_t j = 0; j < c->n_records; j++) {
            const record* b = &c->records[j];
            if (b->encoder != e2) {
                continue;
            }
            for (uint32_t x = 0; x < a->n_bindings; x++) {
                for (uint32_t y = 0; a->buffers[x] != NULL && a->buffers[x]->untracked && y < b->n_bindings; y++) {
                    if (a->buffers[x] == b->buffers[y]) {
                        return 1;
                    }
                }
            }
        }
    }
    return 0;
}

/* The order the GPU may run the encoders in: each after the one before it when it waited for that one's fence or
 * shares no untracked buffer with it; otherwise the GPU may run it first, and the stand-in does. */
static size_t* encoder_order(const mts_commands* c, size_t* n_out) {
    size_t n = c->n_records ? c->records[c->n_records - 1].encoder + 1 : 0;
    size_t* order = calloc(n + 1, sizeof *order);
    int32_t* waits = calloc(n + 1, sizeof *waits);
    for (size_t i = 0; i < c->n_records; i++) {
        waits[c->records[i].encoder] = c->records[i].waits;
    }
    for (size_t e = 0; e < n; e++) {
        order[e] = e;
        if (e > 0 && !waits[e] && share_untracked(c, e - 1, e)) {   /* unordered: it runs before its predecessor */
            order[e] = order[e - 1];
            order[e - 1] = e;
        }
    }
    free(waits);
    *n_out = n;
    return order;
}

/* Runs the recorded dispatches, encoder by encoder in an order the GPU may take; on a fault, `faulted` receives the
 * label of its encoder when the command buffer reports encoders' execution status. */
static int32_t replay(mts_commands* c, char* message, size_t size, char* faulted, size_t faulted_size) {
    size_t n_encoders = 0;
    size_t* order = encoder_order(c, &n_encoders);
    int32_t rc = 0;
    for (size_t k = 0; k < n_encoders && rc == 0; k++) {
        for (size_t i = 0; i < c->n_records && rc == 0; i++) {
            record* r = &c->records[i];
            if (r->encoder != order[k]) {
                continue;
            }
            void** data = calloc(r->n_bindings + 1, sizeof *data);
            int32_t* is_bytes = calloc(r->n_bindings + 1, sizeof *is_bytes);
            for (uint32_t j = 0; j < r->n_bindings; j++) {
                if (r->buffers[j] != NULL) {
                    data[j] = (char*)r->buffers[j]->data + r->offsets[j];
                } else if (r->bytes[j] != NULL) {
                    data[j] = r->bytes[j];
                    is_bytes[j] = 1;
                }
            }
            mts_stub_dispatch d = {
                r->source, r->function, r->kind, {r->size[0], r->size[1], r->size[2]},
                {r->threads[0], r->threads[1], r->threads[2]}, r->n_bindings, data, r->lengths, is_bytes,
                r->n_tg, r->tg,
            };
            rc = g_executor(&d, message, size);
            free(data);
            free(is_bytes);
            if (rc != 0 && c->encoder_status) {
                snprintf(faulted, faulted_size, "%s", r->label);
            }
        }
    }
    free(order);
    return rc;
}

int32_t mts_commands_wait(mts_commands* c, mts_completion* done, char** err) {
    if (!live_handle(c, K_COMMANDS) || done == NULL) {
        return fail_text(err, MTS_ERR_ARGUMENT, "mts_commands_wait: bad argument");
    }
    memset(done, 0, sizeof *done);
    if (!mts_may_wait(c->state)) {
        return fail_text(err, MTS_ERR_STATE, "mts_commands_wait: the command buffer was not committed");
    }
    if (hangs(c)) {
        return fail_text(err, MTS_ERR_STATE, "mts_commands_wait: waited for a command buffer Metal never committed");
    }
    log_line("commands_wait commands=%lld", (long long)c->h.id);
    int32_t detail = 0;
    int32_t code = injected("commands_wait", err, &detail);
    if (code != MTS_OK) {
        done->status = code == MTS_ERR_GPU ? 5 : 0;
        done->error_code = detail;
        return code;
    }
    done->gpu_start = 1.0 + (double)c->h.id;
    done->gpu_end = done->gpu_start + 1e-6 * (double)c->n_dispatches;
    if (g_executor != NULL && !c->waited) {
        char message[2048] = "";
        c->waited = 1;
        if (replay(c, message, sizeof message, done->faulted, sizeof done->faulted) != 0) {
            done->status = 5;
            done->error_code = 3;   /* MTLCommandBufferErrorPageFault */
            return fail_text(err, MTS_ERR_GPU, message[0] ? message : "the executor reported a fault");
        }
    }
    c->waited = 1;
    done->status = 4;
    return MTS_OK;
}

void mts_commands_release(mts_commands* c) {
    if (c != NULL && release_handle(&c->h, K_COMMANDS)) {
        /* as shim.m: never committed, it is committed now; never waited for, it is waited for when it may be (a wait
         * for a command buffer whose commit threw never returns on Metal: counted as a hang) */
        int32_t committed_now = c->state == MTS_CB_OPEN;
        if (committed_now) {
            char* ignored = NULL;
            commit(c, &ignored);
            free(ignored);
        }
        int32_t waited_now = !c->waited && mts_may_wait(c->state) && !hangs(c);
        if (waited_now && g_executor != NULL) {
            char message[2048] = "", faulted[256] = "";
            replay(c, message, sizeof message, faulted, sizeof faulted);
        }
        c->waited = 1;
        log_line("commands_release commands=%lld%s%s", (long long)c->h.id, committed_now ? " committed_at_release=1" : "",
                 waited_now ? " waited_at_release=1" : "");
        free_records(c);
    }
}
