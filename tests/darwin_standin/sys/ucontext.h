/* stand-in for Darwin's <sys/ucontext.h>: ucontext_t holds a pointer to its machine context */
#pragma once
#include <stddef.h>
#include <stdint.h>
#if defined(__aarch64__)
struct __darwin_arm_exception_state64 { uint64_t __far; uint32_t __esr; uint32_t __exception; };
struct __darwin_arm_thread_state64 {
    uint64_t __x[29];
    uint64_t __fp, __lr, __sp, __pc;
    uint32_t __cpsr, __pad;
};
struct __darwin_arm_neon_state64 { __uint128_t __v[32]; uint32_t __fpsr, __fpcr; };
struct __darwin_mcontext64 {
    struct __darwin_arm_exception_state64 __es;
    struct __darwin_arm_thread_state64 __ss;
    struct __darwin_arm_neon_state64 __ns;
};
#elif defined(__x86_64__)
struct __darwin_x86_exception_state64 { uint16_t __trapno, __cpu; uint32_t __err; uint64_t __faultvaddr; };
struct __darwin_x86_thread_state64 {
    uint64_t __rax, __rbx, __rcx, __rdx, __rdi, __rsi, __rbp, __rsp;
    uint64_t __r8, __r9, __r10, __r11, __r12, __r13, __r14, __r15;
    uint64_t __rip, __rflags, __cs, __fs, __gs;
};
struct __darwin_x86_float_state64 { char __opaque[524]; }; /* not used by the runtime */
struct __darwin_mcontext64 {
    struct __darwin_x86_exception_state64 __es;
    struct __darwin_x86_thread_state64 __ss;
    struct __darwin_x86_float_state64 __fs;
};
#endif
typedef struct __darwin_mcontext64* mcontext_t;
struct __darwin_sigaltstack { void* ss_sp; size_t ss_size; int ss_flags; };
struct __darwin_ucontext {
    int uc_onstack;
    uint32_t uc_sigmask;
    struct __darwin_sigaltstack uc_stack;
    struct __darwin_ucontext* uc_link;
    size_t uc_mcsize;
    struct __darwin_mcontext64* uc_mcontext;
};
typedef struct __darwin_ucontext ucontext_t;
