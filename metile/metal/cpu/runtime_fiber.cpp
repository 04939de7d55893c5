/* runtime_fiber.cpp - fiber stacks and the context switch.
 *
 * The switch is hand-written for x86-64 (System V) and aarch64: it pushes the callee-saved registers and the FP
 * control words (mxcsr and the x87 control word; fpcr) on the running stack, stores the stack pointer, loads the
 * other one and pops. The control words are only reloaded when they differ, which they almost never do: loading
 * them is what costs. Other architectures fall back to ucontext (a system call per switch).
 *
 * A fresh fiber's stack holds a frame that "returns" into mt_fiber_trampoline with the Fiber* in a callee-saved
 * register; the trampoline calls mt_fiber_main(Fiber*), which never returns.
 */
#include "runtime_internal.h"

#include <sys/mman.h>
#include <unistd.h>

namespace mtrt {

size_t page_size() {
    static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return page;
}

bool stack_alloc(Stack& s, size_t bytes) {
    const size_t guard = stack_guard_bytes();
    bytes = round_up(bytes, page_size());
    const size_t len = bytes + guard;
    void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return false;
    char* base = static_cast<char*>(m);
    if (mprotect(base, guard, PROT_NONE) != 0) {
        munmap(m, len);
        return false;
    }
    s.map = base;
    s.map_len = len;
    s.lo = base + guard;
    s.hi = base + len;
    return true;
}

void stack_free(Stack& s) {
    if (s.map) munmap(s.map, s.map_len);
    s = Stack{};
}

} // namespace mtrt

#ifdef MT_ASM_SWITCH
extern "C" void mt_fiber_trampoline() __attribute__((visibility("hidden")));
#include "runtime_switch.h"

#if defined(__x86_64__)
/* The frame mt_ctx_switch keeps (runtime_switch.h), from the saved sp up: mxcsr (4 bytes), x87 control word (2),
 * pad (2), r15, r14, r13, r12, rbx, rbp, return address. */
namespace {
constexpr size_t kFrameWords = 10; /* control words, 6 registers, return address, 2 words of alignment */
}

void mtrt::ctx_prepare(Fiber* f) {
    /* after `ret` pops the return address, rsp = hi - 16: 16-byte aligned before the trampoline's call */
    uint64_t* top = reinterpret_cast<uint64_t*>(f->stack.hi) - kFrameWords;
    uint32_t mxcsr;
    uint16_t fpcw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fpcw));
    top[0] = static_cast<uint64_t>(mxcsr) | (static_cast<uint64_t>(fpcw) << 32);
    top[1] = 0;                                      /* r15 */
    top[2] = 0;                                      /* r14 */
    top[3] = 0;                                      /* r13 */
    top[4] = reinterpret_cast<uint64_t>(f);          /* r12 */
    top[5] = 0;                                      /* rbx */
    top[6] = 0;                                      /* rbp */
    top[7] = reinterpret_cast<uint64_t>(&mt_fiber_trampoline);
    top[8] = 0;
    top[9] = 0;
    f->ctx.sp = top;
}

#elif defined(__aarch64__)
/* The frame mt_ctx_switch keeps (runtime_switch.h), from the saved sp up: x19..x28, x29, x30, d8..d15, fpcr, pad:
 * 176 bytes. */

void mtrt::ctx_prepare(Fiber* f) {
    uint64_t* top = reinterpret_cast<uint64_t*>(f->stack.hi - 176);
    memset(top, 0, 176);
    uint64_t fpcr;
    asm volatile("mrs %0, fpcr" : "=r"(fpcr));
    top[0] = reinterpret_cast<uint64_t>(f);                        /* x19 */
    top[11] = reinterpret_cast<uint64_t>(&mt_fiber_trampoline);    /* x30 */
    top[20] = fpcr;
    f->ctx.sp = top;
}
#endif

#else /* ucontext fallback */

static void fiber_entry(unsigned hi, unsigned lo) {
    uintptr_t p = (static_cast<uintptr_t>(hi) << 16 << 16) | lo;
    mt_fiber_main(reinterpret_cast<mtrt::Fiber*>(p));
}

void mtrt::ctx_prepare(Fiber* f) {
    getcontext(&f->ctx.uc);
    f->ctx.uc.uc_stack.ss_sp = f->stack.lo;
    f->ctx.uc.uc_stack.ss_size = static_cast<size_t>(f->stack.hi - f->stack.lo);
    f->ctx.uc.uc_link = nullptr;
    uintptr_t p = reinterpret_cast<uintptr_t>(f);
    makecontext(&f->ctx.uc, reinterpret_cast<void (*)()>(fiber_entry), 2, static_cast<unsigned>(p >> 16 >> 16),
                static_cast<unsigned>(p));
}

void mtrt::ctx_switch(Ctx* from, Ctx* to) { swapcontext(&from->uc, &to->uc); }
#endif
