/* stand-in for Darwin's <dlfcn.h> */
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
typedef struct dl_info {
    const char* dli_fname;
    void* dli_fbase; /* the image's Mach-O header */
    const char* dli_sname;
    void* dli_saddr;
} Dl_info;
int dladdr(const void* addr, Dl_info* info);
#ifdef __cplusplus
}
#endif
