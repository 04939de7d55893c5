/* runtime_switch.h - the context switch between fibers (mt_ctx_switch) and the first frame of a fresh fiber
 * (mt_fiber_trampoline), in assembly for x86-64 (System V) and aarch64; included once, by runtime_fiber.cpp, which
 * says what the frames hold and builds a fresh fiber's.
 *
 * The instructions are the same on Linux and macOS; the directives around them are not. An ELF object (Linux) names
 * a symbol as C does and marks it `.hidden`, with a `.type` and `.size`; a Mach-O object (macOS) names it with a
 * leading underscore, marks it `.private_extern` and has no `.type` or `.size`; a call to a function of the same
 * library goes through the PLT on ELF and directly on Mach-O. MT_ASM_FUNC and MT_ASM_END write either set.
 *
 * The file includes nothing, so that tests can assemble it alone for every target (`clang -target
 * arm64-apple-macos14` included) without that target's system headers.
 */
#ifndef METILE_RUNTIME_SWITCH_H
#define METILE_RUNTIME_SWITCH_H

#if defined(__APPLE__)
#define MT_ASM_CALL(name) "_" #name
#define MT_ASM_FUNC(name) \
    "    .globl _" #name "\n    .private_extern _" #name "\n    .p2align 4\n_" #name ":\n"
#define MT_ASM_END(name) ""
#else
#if defined(__x86_64__)
#define MT_ASM_TYPE "@function"
#define MT_ASM_CALL(name) #name "@PLT"
#else
#define MT_ASM_TYPE "%function"
#define MT_ASM_CALL(name) #name
#endif
#define MT_ASM_FUNC(name) \
    "    .globl " #name "\n    .hidden " #name "\n    .type " #name ", " MT_ASM_TYPE "\n    .p2align 4\n" #name ":\n"
#define MT_ASM_END(name) "    .size " #name ", .-" #name "\n"
#endif

#if defined(__x86_64__)
asm("    .text\n" MT_ASM_FUNC(mt_ctx_switch) R"(
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
)" MT_ASM_END(mt_ctx_switch) MT_ASM_FUNC(mt_fiber_trampoline) R"(
    .cfi_startproc
    .cfi_undefined rip
    xorl %ebp, %ebp
    movq %r12, %rdi
    call )" MT_ASM_CALL(mt_fiber_main) R"(
    ud2
    .cfi_endproc
)" MT_ASM_END(mt_fiber_trampoline));

#elif defined(__aarch64__)
asm("    .text\n" MT_ASM_FUNC(mt_ctx_switch) R"(
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
)" MT_ASM_END(mt_ctx_switch) MT_ASM_FUNC(mt_fiber_trampoline) R"(
    .cfi_startproc
    .cfi_undefined x30
    mov x29, #0
    mov x0, x19
    bl )" MT_ASM_CALL(mt_fiber_main) R"(
    brk #1
    .cfi_endproc
)" MT_ASM_END(mt_fiber_trampoline));
#endif

#endif /* METILE_RUNTIME_SWITCH_H */
