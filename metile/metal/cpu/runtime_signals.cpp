/* runtime_signals.cpp - turning signals raised by kernel code into faults.
 *
 * During a launch the runtime handles SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP and the watchdog signal (on the
 * worker's sigaltstack). A signal on a worker that is running kernel code records the launch's fault (first one
 * wins) and siglongjmps to the worker's launch loop; any other signal goes to the handler that was installed
 * before the launch. The previous handlers are restored when the launch ends.
 *
 * The handler only stores raw facts (signal, code, pc, address); module lookup and messages are made after the
 * launch, outside signal context.
 */
#include "runtime_internal.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>

namespace mtrt {
namespace {

constexpr int kNumSignals = 6;
int g_signals[kNumSignals] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, 0};
struct sigaction g_old[kNumSignals];
/* executable segment of this library: a watchdog signal landing in runtime code is left to the abort checks */
uintptr_t g_rt_text_lo = 0, g_rt_text_hi = 0;

/* A fault in the guard below the running fiber's stack, or with the stack pointer already below it. */
bool stack_overflow(const Worker* w, const char* addr, const char* sp) {
    const Stack& s = w->cur->stack;
    if (addr >= s.lo - stack_guard_bytes() && addr < s.lo) return true;
    return sp && sp < s.lo && sp + (1u << 20) >= s.lo;
}

/* The undefined-behaviour check number clang encodes in its traps (ud1 on x86-64, brk #0x55NN on aarch64);
 * -1 for a plain trap (gcc's ud2 / brk #1000). */
int decode_trap(const void* pc) {
    if (!pc) return -1;
#if defined(__x86_64__)
    const unsigned char* b = static_cast<const unsigned char*>(pc);
    if (b[0] == 0x67) ++b;
    if (b[0] == 0x0F && b[1] == 0xB9 && b[2] == 0x40) return b[3];
#elif defined(__aarch64__)
    const uint32_t insn = *static_cast<const uint32_t*>(pc);
    if ((insn & 0xFFE0001Fu) == 0xD4200000u) {
        const uint32_t imm = (insn >> 5) & 0xFFFFu;
        if ((imm & 0xFF00u) == 0x5500u) return static_cast<int>(imm & 0xFFu);
    }
#endif
    return -1;
}
constexpr int kClangDivremCheck = 3; /* SanitizerHandler::DivremOverflow, stable across clang releases */
constexpr int kTrapPerf = 6;         /* TRAP_PERF: a perf event with sigtrap (a watchpoint of runtime_watch.cpp) */

int slot_of(int sig) {
    for (int i = 0; i < kNumSignals; ++i)
        if (g_signals[i] == sig) return i;
    return -1;
}

/* Not ours: hand the signal to the handler installed before the launch. */
void chain(int sig, siginfo_t* si, void* uc) {
    const int i = slot_of(sig);
    if (i < 0) return;
    const struct sigaction& old = g_old[i];
    if (old.sa_flags & SA_SIGINFO) {
        if (old.sa_sigaction) old.sa_sigaction(sig, si, uc);
        return;
    }
    if (old.sa_handler == SIG_IGN) return;
    if (old.sa_handler == SIG_DFL) {
        /* restore the default action: a fault re-executes the instruction, a sent signal is raised again */
        sigaction(sig, &old, nullptr);
        if (si->si_code <= 0 || sig == SIGTRAP) raise(sig);
        return;
    }
    old.sa_handler(sig);
}

void on_signal(int sig, siginfo_t* si, void* ucv) {
    const int saved_errno = errno;
    Worker* w = signal_worker();
    Launch* L = w ? w->launch : nullptr;
    const bool watchdog = sig == g_signals[kNumSignals - 1];
    if (sig == SIGTRAP && si->si_code == kTrapPerf && w) {
        /* a watchpoint on the bytes before a bound buffer (runtime_watch.cpp), trapping after the access; one a
         * worker had not retargeted yet, or hit outside kernel code, is not a fault: the access is done, go on */
        const int slot = L && w->in_kernel && w->cur ? watch_slot(L, reinterpret_cast<uintptr_t>(si->si_addr)) : -1;
        if (slot < 0) {
            errno = saved_errno;
            return;
        }
        w->in_kernel = 0;
        if (mt_fault* f = claim_fault(L, w, MT_FAULT_BAD_ACCESS, 0)) {
            f->address = L->watch.addr[slot];
            L->pc = static_cast<const char*>(platform::context_pc(ucv)) - 1; /* the access */
            L->sig = sig;
            L->sig_code = si->si_code;
            L->watch_hit = slot;
        }
        abandon(w);
    }
    if (watchdog && L && w->caller && L->deadline_ns && !L->timed_out.load(std::memory_order_relaxed)) {
        /* the calling thread's own timer (runtime.cpp): past the deadline, the launch has timed out */
        timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if (static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec) >= L->deadline_ns) {
            L->timed_out.store(1);
            L->abort.store(1);
        }
    }
    if (!L || !w->in_kernel || !w->cur || (watchdog && !L->timed_out.load(std::memory_order_relaxed))) {
        if (!watchdog) chain(sig, si, ucv);
        errno = saved_errno;
        return;
    }
    const void* pc = platform::context_pc(ucv);
    if (watchdog && reinterpret_cast<uintptr_t>(pc) >= g_rt_text_lo && reinterpret_cast<uintptr_t>(pc) < g_rt_text_hi) {
        /* inside a runtime service: its next switch sees the abort flag and reports the kernel's call site */
        errno = saved_errno;
        return;
    }
    const char* addr = static_cast<const char*>(si->si_addr);
    int32_t kind = MT_FAULT_TRAP;
    int check = -1;
    switch (sig) {
        case SIGSEGV:
        case SIGBUS:
            /* macOS raises SIGBUS for a protected page (a guard), Linux SIGSEGV */
            kind = stack_overflow(w, addr, platform::context_sp(ucv))      ? MT_FAULT_STACK_OVERFLOW
                   : platform::general_protection_fault(sig, si->si_code) ? MT_FAULT_MISALIGNED
                                                                          : MT_FAULT_BAD_ACCESS;
            break;
        case SIGFPE:
            kind = si->si_code == FPE_INTDIV || si->si_code == FPE_INTOVF ? MT_FAULT_DIV_ZERO : MT_FAULT_TRAP;
            addr = nullptr;
            break;
        case SIGILL:
        case SIGTRAP:
            check = decode_trap(pc);
            kind = check == kClangDivremCheck ? MT_FAULT_DIV_ZERO : MT_FAULT_TRAP;
            addr = nullptr;
            break;
        default: /* watchdog */
            kind = MT_FAULT_HANG;
            addr = nullptr;
            break;
    }
    w->in_kernel = 0;
    if (mt_fault* f = claim_fault(L, w, kind, 0)) {
        f->address = reinterpret_cast<uintptr_t>(addr);
        L->pc = pc;
        L->sig = sig;
        L->sig_code = si->si_code;
        L->trap_check = check;
    }
    abandon(w);
}

} // namespace

int watchdog_signal() {
    static const int sig = platform::watchdog_signal();
    return sig;
}

void install_handlers() {
    g_signals[kNumSignals - 1] = watchdog_signal();
    if (!g_rt_text_hi) platform::code_segment(reinterpret_cast<const void*>(&install_handlers), &g_rt_text_lo,
                                              &g_rt_text_hi);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (int sig : g_signals) sigaddset(&sa.sa_mask, sig);
    for (int i = 0; i < kNumSignals; ++i) sigaction(g_signals[i], &sa, &g_old[i]);
    count_syscalls(kNumSignals);
}

void restore_handlers() {
    for (int i = kNumSignals; i-- > 0;) sigaction(g_signals[i], &g_old[i], nullptr);
    count_syscalls(kNumSignals);
}

void describe_signal(Launch* L) {
    mt_fault& f = L->fault;
    const char* name = L->sig == SIGSEGV ? "SIGSEGV" : L->sig == SIGBUS ? "SIGBUS" : L->sig == SIGFPE ? "SIGFPE"
                     : L->sig == SIGILL ? "SIGILL" : L->sig == SIGTRAP ? "SIGTRAP" : "signal";
    switch (f.kind) {
        case MT_FAULT_BAD_ACCESS:
            if (L->watch_hit >= 0) {
                snprintf(f.message, sizeof f.message, "found by a hardware watchpoint on those 8 bytes");
                break;
            }
            snprintf(f.message, sizeof f.message, "%s: %s", name,
                     L->sig == SIGSEGV && L->sig_code == SEGV_MAPERR     ? "address not mapped"
                     : platform::protected_page_fault(L->sig, L->sig_code) ? "access to a protected page (guard page)"
                                                                           : "invalid access");
            break;
        case MT_FAULT_MISALIGNED:
            snprintf(f.message, sizeof f.message,
                     "%s: general-protection fault: a 16-byte vector access at an address that is not a multiple of "
                     "16 (or an address outside the address space)", name);
            break;
        case MT_FAULT_STACK_OVERFLOW:
            snprintf(f.message, sizeof f.message,
                     "a thread used more than its %zu KiB stack (deep recursion or large local arrays; see "
                     "stack_bytes)", L->stack_bytes / 1024);
            break;
        case MT_FAULT_DIV_ZERO:
            snprintf(f.message, sizeof f.message, "%s: %s", name,
                     L->sig != SIGFPE ? "integer division by zero (undefined-behaviour trap)"
                     : L->sig_code == FPE_INTOVF ? "integer division overflow"
                                                 : "integer division by zero (or INT_MIN / -1)");
            break;
        case MT_FAULT_TRAP:
            if (L->sig == SIGFPE)
                snprintf(f.message, sizeof f.message, "SIGFPE: floating-point exception (code %d)", L->sig_code);
            else if (L->trap_check >= 0)
                snprintf(f.message, sizeof f.message, "%s: undefined-behaviour trap (check %d: misaligned access or "
                         "out-of-bounds index)", name, L->trap_check);
            else
                snprintf(f.message, sizeof f.message,
                         "%s: undefined-behaviour trap (misaligned access or integer division by zero)", name);
            break;
        case MT_FAULT_HANG:
            snprintf(f.message, sizeof f.message, "stopped by the watchdog");
            break;
        default:
            break;
    }
}

} // namespace mtrt
