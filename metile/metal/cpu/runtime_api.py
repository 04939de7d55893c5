"""cffi binding of the CPU runtime's launch interface (Part 2 of `mt_runtime.h`), and `mt_copy`, the copy of arrays
into device memory and back (runtime_copy.cpp, declared there and here only: no kernel calls it, and every kernel build
is keyed by `mt_runtime.h`).

The runtime library is built from `runtime*.cpp` with the system compiler on first use, cached like
every other artefact, and loaded with `RTLD_GLOBAL` so that kernel libraries resolve the services
of Part 1 (`mt_threadgroup_barrier`, `mt_simd_exchange`, ...) against it.
"""

from __future__ import annotations

import platform
import threading
from pathlib import Path

import cffi

from metile.metal.cpu.toolchain import (
    HERE,
    Compiler,
    cached_build,
    requirement,
    run_compiler,
    sha256_hex,
    shared_library,
    tree_digest,
)
from metile.metal.errors import CompilerNotFoundError

# mt_runtime.h's enum mt_prof_counter, in order: the counters of a profile entry
PROFILE_COUNTERS = (
    "dev_read_bytes", "dev_write_bytes", "dev_lane_ops", "dev_simd_ops", "dev_segments", "dev_active_lanes",
    "dev_distinct_bytes", "tg_read_bytes", "tg_write_bytes", "tg_lane_ops", "tg_simd_ops", "tg_passes",
    "tg_conflicts", "atomics", "tg_barriers", "sg_barriers", "collectives",
    "mat_load_float", "mat_load_half", "mat_load_bfloat", "mat_load_other",
    "mat_store_float", "mat_store_half", "mat_store_bfloat", "mat_store_other",
    "mma_float", "mma_half", "mma_bfloat", "mma_other", "dev_load_segments", "dev_load_distinct_bytes",
    "tensor_flops_float", "tensor_flops_half", "tensor_flops_bfloat", "tensor_flops_tf32",
    "tensor_thread_flops_float", "tensor_thread_flops_half", "tensor_thread_flops_bfloat", "tensor_thread_flops_tf32",
    "tensor_runs_thread", "tensor_runs_simdgroup", "tensor_runs_simdgroups", "coop_loads", "coop_stores",
    "alu_float", "alu_int", "alu_special", "alu_int_issue",
)

CDEF = """
typedef struct mt_thread_pos mt_thread_pos;
typedef void (*mt_kernel_fn)(void* const* buffers, const mt_thread_pos* pos);

typedef struct mt_fault {
    int32_t kind;
    uint32_t threadgroup[3];
    uint32_t thread[3];
    uint32_t line;
    uint64_t address;
    uint64_t pc_offset;
    char module[512];
    int32_t has_other;
    uint32_t other_thread[3];
    uint32_t other_line;
    uint64_t other_pc_offset;
    char message[512];
    uint32_t address_span;
} mt_fault;

typedef struct mt_profile_desc {
    const uint64_t* threadgroups;
    uint32_t n_threadgroups;
    uint32_t n_device;
    const uint64_t* device_lo;
    const uint64_t* device_hi;
    uint32_t segment_bytes;
    uint32_t banks, bank_bytes;
    uint32_t only_counted;
} mt_profile_desc;

typedef struct mt_prof_entry {
    uint64_t pc_offset;
    uint32_t line;
    uint32_t reserved;
    uint64_t c[COUNTERS];
} mt_prof_entry;

typedef struct mt_profile_result {
    uint64_t threadgroups;
    uint64_t unique_tg_bytes;
    uint64_t unique_bytes;
    uint64_t unique_tg_segments;
    uint64_t unique_segments;
    uint64_t max_tg_memory;
    uint32_t n_entries;
    uint32_t reserved;
    mt_prof_entry* entries;
    char module[512];
    uint64_t* trace;
    uint64_t n_trace;
    uint64_t* trace_threadgroups;
    uint64_t n_trace_threadgroups;
    uint32_t trace_complete;
    uint32_t trace_step_segments;
} mt_profile_result;

void mt_profile_free(mt_profile_result* r);

typedef struct mt_launch_desc {
    mt_kernel_fn fn;
    void* const* buffers;
    uint32_t n_buffers;
    const size_t* tg_param_bytes;
    uint32_t n_tg_params;
    uint32_t threadgroups[3];
    uint32_t threads_per_tg[3];
    uint32_t grid_threads[3];
    uint32_t workers;
    double timeout_s;
    int32_t sanitize;
    int32_t reverse_order;
    uint8_t tg_fill;
    size_t max_tg_memory;
    size_t stack_bytes;
    const mt_profile_desc* profile;
    mt_profile_result* profile_out;
    int32_t apple_barriers;
    const uint32_t* watch_buffers;
    uint32_t n_watch_buffers;
} mt_launch_desc;

int32_t mt_launch(const mt_launch_desc* desc, mt_fault* fault);
void* mt_buffer_alloc(size_t bytes);
void* mt_buffer_alloc_staging(size_t bytes);
void mt_buffer_free(void* data);
int32_t mt_buffer_extent(const void* data, uint64_t* lo, uint64_t* hi);
uint32_t mt_runtime_abi_version(void);
int32_t mt_watch_available(void);
uint64_t mt_launch_syscalls(void);
void mt_copy(void* dst, const void* src, size_t bytes);
""".replace("COUNTERS", str(len(PROFILE_COUNTERS)))

ABI_VERSION = 12
FAULT_KINDS = {
    1: "bad-access", 2: "misaligned", 3: "division-by-zero", 4: "barrier-divergence",
    5: "simd-divergence", 6: "hang", 7: "threadgroup-memory", 8: "stack-overflow", 9: "trap",
    10: "uninitialized-read", 11: "data-race", 12: "kernel", 13: "internal",
}

ffi = cffi.FFI()
ffi.cdef(CDEF)
_lock = threading.Lock()
_loaded: dict[Path, object] = {}


def runtime_sources() -> list[Path]:
    return sorted(HERE.glob("runtime*.cpp"))


def runtime_headers() -> list[Path]:
    return sorted(HERE.glob("runtime*.h")) + [HERE / "mt_runtime.h"]


RUNTIME_FLAGS = ["-std=c++17", "-O2", "-fPIC", "-pthread", "-U_FORTIFY_SOURCE", "-fvisibility=hidden", "-g1"]


def runtime_flags(compiler: Compiler, system: str | None = None) -> list[str]:
    """RUNTIME_FLAGS and the flag of a shared library on `system` (`-shared`; `-dynamiclib` on macOS), plus TLS
    descriptors on x86-64 Linux where the compiler has them: every runtime service reads the thread's worker from
    thread-local storage, and in a dlopen'ed library the default model makes that a call to __tls_get_addr (about 5%
    of a GEMM's run time). AArch64 uses descriptors by default, and Mach-O has thread-local variables of its own
    (no -mtls-dialect). The initial-exec model would be faster still but can make dlopen fail where static TLS space
    is used up."""
    system = system or platform.system()
    if system == "Darwin":
        return [*RUNTIME_FLAGS, "-dynamiclib"]
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    descriptors = x86 and (compiler.is_gcc or compiler.major >= 19)
    return [*RUNTIME_FLAGS, "-shared"] + (["-mtls-dialect=gnu2"] if descriptors else [])


def runtime_libraries(system: str | None = None) -> list[str]:
    """What the runtime library links against besides the C and C++ libraries: glibc before 2.34 keeps dladdr in
    libdl; macOS has it in its C library."""
    return [] if (system or platform.system()) == "Darwin" else ["-ldl"]


def build_runtime(compiler: Compiler, cache_dir: Path) -> Path:
    sources = runtime_sources()
    flags = runtime_flags(compiler)
    key = sha256_hex("runtime", compiler.version_text, " ".join(flags), tree_digest(sources + runtime_headers()))
    path = cache_dir / "runtime" / f"libmetile_cpu_rt-{key[:24]}{shared_library()[0]}"
    path.parent.mkdir(parents=True, exist_ok=True)

    def build(out: Path) -> None:
        run_compiler([compiler.path, *flags, f"-I{HERE}", *map(str, sources), "-o", str(out), *runtime_libraries()])

    return cached_build(path, build)


def load_runtime(compiler: Compiler, cache_dir: Path):
    """The runtime library (built and loaded once per process and cache location)."""
    path = build_runtime(compiler, cache_dir)
    with _lock:
        lib = _loaded.get(path)
        if lib is None:
            try:
                lib = ffi.dlopen(str(path), ffi.RTLD_NOW | ffi.RTLD_GLOBAL)
            except OSError as e:  # built, but not loadable: a C driver (CXX=gcc) leaves out the C++ library
                raise CompilerNotFoundError(
                    f"the CPU runtime built by {compiler.path} does not load ({e}); CXX must name a C++ compiler "
                    f"({requirement(platform.system())}), not a C one") from None
            version = lib.mt_runtime_abi_version()
            if version != ABI_VERSION:
                raise RuntimeError(f"CPU runtime ABI {version} does not match the binding's {ABI_VERSION}")
            _loaded[path] = lib
    return lib
