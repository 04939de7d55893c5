/* stand-in for Darwin's <signal.h>: what runtime_platform.h uses (no SIGRTMIN: Darwin has no real-time signals) */
#pragma once
#include <sys/ucontext.h>
#define SIGBUS 10
#define SIGSEGV 11
#define SIGURG 16
#define SEGV_MAPERR 1
#define SEGV_ACCERR 2
