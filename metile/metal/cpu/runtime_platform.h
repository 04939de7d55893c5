/* runtime_platform.h - what the CPU runtime needs of the operating system that differs between Linux (glibc) and
 * macOS (Darwin), behind one set of names, so that the runtime*.cpp files hold no system conditionals of their own.
 *
 *                        Linux                                    macOS
 * pc, sp of a signal     uc_mcontext.gregs[REG_RIP/RSP] (x86-64), uc_mcontext->__ss.__rip/__rsp (x86-64),
 *                        uc_mcontext.pc/sp (aarch64)              uc_mcontext->__ss.__pc/__sp (arm64)
 * ucontext_t from        <ucontext.h>                             <sys/ucontext.h> (<ucontext.h> demands
 *                                                                 _XOPEN_SOURCE, and only its deprecated
 *                                                                 getcontext family needs it)
 * thread name            pthread_setname_np(thread, name)         pthread_setname_np(name), the calling thread's
 * usable cores           sched_getaffinity (the process's CPU     sysconf(_SC_NPROCESSORS_ONLN) (no affinity
 *                        set, as taskset and cgroups limit it)     masks on macOS)
 * this library's code    dl_iterate_phdr: the PT_LOAD segment     dladdr for its Mach-O header, then its
 *                        with PF_X holding an address             __TEXT segment (getsegmentdata)
 * watchdog signal        SIGRTMIN + 5                             SIGURG (no real-time signals; SIGURG is
 *                                                                 ignored by default, so a stray one harms none)
 * anonymous mappings     MAP_ANONYMOUS                            MAP_ANON (MAP_ANONYMOUS in newer SDKs)
 * a guard page hit       SIGSEGV (SEGV_ACCERR)                    SIGBUS (handled like SIGSEGV)
 *
 * Only C system headers are included here, so that the Darwin branches can be compiled on Linux with
 * `-target arm64-apple-macos14 -fsyntax-only` against stand-in declarations (tests/darwin_standin).
 */
#ifndef METILE_RUNTIME_PLATFORM_H
#define METILE_RUNTIME_PLATFORM_H

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__APPLE__)
#include <mach-o/getsect.h>
#include <mach-o/loader.h>
#include <sys/ucontext.h>
#else
#include <link.h>
#include <sched.h>
#include <ucontext.h>
#endif

#if !defined(MAP_ANONYMOUS) && defined(MAP_ANON)
#define MAP_ANONYMOUS MAP_ANON
#endif
#ifndef MAP_NORESERVE
#define MAP_NORESERVE 0 /* a hint only: without it the mapping may count against swap, nothing else changes */
#endif

namespace mtrt {
namespace platform {

/* The interrupted instruction and stack pointer of a signal handler's context (null where unknown). */
inline const void* context_pc(const void* ucv) {
    const ucontext_t* uc = static_cast<const ucontext_t*>(ucv);
#if defined(__APPLE__) && defined(__x86_64__)
    return reinterpret_cast<const void*>(uc->uc_mcontext->__ss.__rip);
#elif defined(__APPLE__) && defined(__aarch64__)
    return reinterpret_cast<const void*>(uc->uc_mcontext->__ss.__pc);
#elif defined(__x86_64__)
    return reinterpret_cast<const void*>(uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
    return reinterpret_cast<const void*>(uc->uc_mcontext.pc);
#else
    (void)uc;
    return nullptr;
#endif
}

inline const char* context_sp(const void* ucv) {
    const ucontext_t* uc = static_cast<const ucontext_t*>(ucv);
#if defined(__APPLE__) && defined(__x86_64__)
    return reinterpret_cast<const char*>(uc->uc_mcontext->__ss.__rsp);
#elif defined(__APPLE__) && defined(__aarch64__)
    return reinterpret_cast<const char*>(uc->uc_mcontext->__ss.__sp);
#elif defined(__x86_64__)
    return reinterpret_cast<const char*>(uc->uc_mcontext.gregs[REG_RSP]);
#elif defined(__aarch64__)
    return reinterpret_cast<const char*>(uc->uc_mcontext.sp);
#else
    (void)uc;
    return nullptr;
#endif
}

/* Names the calling thread (at most 15 characters show on Linux). */
inline void set_thread_name(const char* name) {
#if defined(__APPLE__)
    pthread_setname_np(name);
#else
    pthread_setname_np(pthread_self(), name);
#endif
}

/* The cores this process may run on: its affinity mask where the system has one, else the online cores. */
inline uint32_t usable_cpus() {
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        const int n = CPU_COUNT(&set);
        if (n > 0) return static_cast<uint32_t>(n);
    }
#endif
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? static_cast<uint32_t>(n) : 1;
}

/* The executable segment of the loaded module holding `addr`, as [*lo, *hi); false when it cannot be found. */
inline bool code_segment(const void* addr, uintptr_t* lo, uintptr_t* hi) {
#if defined(__APPLE__)
    Dl_info info;
    if (!dladdr(addr, &info) || !info.dli_fbase) return false;
    unsigned long size = 0;
    const uint8_t* text = getsegmentdata(static_cast<const struct mach_header_64*>(info.dli_fbase), "__TEXT", &size);
    const uintptr_t seg_lo = reinterpret_cast<uintptr_t>(text), at = reinterpret_cast<uintptr_t>(addr);
    if (!text || at < seg_lo || at >= seg_lo + size) return false;
    *lo = seg_lo;
    *hi = seg_lo + size;
    return true;
#else
    struct Find {
        uintptr_t addr, lo, hi;
    } find{reinterpret_cast<uintptr_t>(addr), 0, 0};
    dl_iterate_phdr(
        [](struct dl_phdr_info* info, size_t, void* data) -> int {
            Find* f = static_cast<Find*>(data);
            for (int i = 0; i < info->dlpi_phnum; ++i) {
                const ElfW(Phdr)& ph = info->dlpi_phdr[i];
                if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
                const uintptr_t seg_lo = info->dlpi_addr + ph.p_vaddr, seg_hi = seg_lo + ph.p_memsz;
                if (f->addr >= seg_lo && f->addr < seg_hi) {
                    f->lo = seg_lo;
                    f->hi = seg_hi;
                    return 1;
                }
            }
            return 0;
        },
        &find);
    if (!find.hi) return false;
    *lo = find.lo;
    *hi = find.hi;
    return true;
#endif
}

/* Whether a fault signal says the address is mapped but protected (a guard page): SIGSEGV with SEGV_ACCERR on
 * Linux; on macOS SIGBUS (its kernel turns a protection failure into SIGBUS), or that SIGSEGV. */
constexpr bool protected_page_fault(int sig, int code) {
#if defined(__APPLE__)
    if (sig == SIGBUS) return true;
#endif
    return sig == SIGSEGV && code == SEGV_ACCERR;
}

/* Whether a fault signal is an x86-64 general-protection fault: SIGSEGV with SI_KERNEL on Linux, no address. In kernel
 * code it is, in practice, a 16-byte vector load or store (movaps, an SSE operand) at an address that is not a multiple
 * of 16: clang copies a vector type with such instructions, and its alignment check does not cover a vector's copy
 * (g++'s does, a trap). A non-canonical address (far outside the address space) raises it too. */
constexpr bool general_protection_fault(int sig, int code) {
#if defined(__linux__) && defined(__x86_64__)
    return sig == SIGSEGV && code == SI_KERNEL;
#else
    (void)sig;
    (void)code;
    return false;
#endif
}

/* The signal that stops a launch past its timeout (sent to the workers still running it). */
inline int watchdog_signal() {
#if defined(SIGRTMIN) && !defined(MT_NO_RT_SIGNALS) /* the latter tests macOS's choice on Linux */
    return SIGRTMIN + 5;
#else
    return SIGURG;
#endif
}

} // namespace platform
} // namespace mtrt

#endif /* METILE_RUNTIME_PLATFORM_H */
