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

#if defined(__x86_64__)
/* Frame (from the saved sp up): mxcsr (4 bytes), x87 control word (2), pad (2), r15, r14, r13, r12, rbx, rbp,
 * return address. */
asm(R"(
    .text
    .globl mt_ctx_switch
    .hidden mt_ctx_switch
    .type mt_ctx_switch, @function
    .p2align 4
mt_ctx_switch:
    .cfi_startproc
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movl (%rsp), %eax
    movzwl 4(%rsp), %ecx
    movq %rsi, %rsp
    cmpl (%rsp), %eax
    jne 2f
    cmpw 4(%rsp), %cx
    jne 2f
1:
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
2:
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    jmp 1b
    .cfi_endproc
    .size mt_ctx_switch, .-mt_ctx_switch

    .globl mt_fiber_trampoline
    .hidden mt_fiber_trampoline
    .type mt_fiber_trampoline, @function
    .p2align 4
mt_fiber_trampoline:
    .cfi_startproc
    .cfi_undefined rip
    xorl %ebp, %ebp
    movq %r12, %rdi
    call mt_fiber_main@PLT
    ud2
    .cfi_endproc
    .size mt_fiber_trampoline, .-mt_fiber_trampoline
)");

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
/* Frame (from the saved sp up): x19..x28, x29, x30, d8..d15, fpcr, pad: 176 bytes. */
asm(R"(
    .text
    .globl mt_ctx_switch
    .hidden mt_ctx_switch
    .type mt_ctx_switch, %function
    .p2align 4
mt_ctx_switch:
    .cfi_startproc
    sub sp, sp, #176
    stp x19, x20, [sp, #0]
    stp x21, x22, [sp, #16]
    stp x23, x24, [sp, #32]
    stp x25, x26, [sp, #48]
    stp x27, x28, [sp, #64]
    stp x29, x30, [sp, #80]
    stp d8, d9, [sp, #96]
    stp d10, d11, [sp, #112]
    stp d12, d13, [sp, #128]
    stp d14, d15, [sp, #144]
    mrs x9, fpcr
    str x9, [sp, #160]
    mov x10, sp
    str x10, [x0]
    mov sp, x1
    ldr x10, [sp, #160]
    cmp x9, x10
    b.eq 1f
    msr fpcr, x10
1:
    ldp x19, x20, [sp, #0]
    ldp x21, x22, [sp, #16]
    ldp x23, x24, [sp, #32]
    ldp x25, x26, [sp, #48]
    ldp x27, x28, [sp, #64]
    ldp x29, x30, [sp, #80]
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    add sp, sp, #176
    ret
    .cfi_endproc
    .size mt_ctx_switch, .-mt_ctx_switch

    .globl mt_fiber_trampoline
    .hidden mt_fiber_trampoline
    .type mt_fiber_trampoline, %function
    .p2align 4
mt_fiber_trampoline:
    .cfi_startproc
    .cfi_undefined x30
    mov x29, #0
    mov x0, x19
    bl mt_fiber_main
    brk #1
    .cfi_endproc
    .size mt_fiber_trampoline, .-mt_fiber_trampoline
)");

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
