/* stand-in for Darwin's <unistd.h> */
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
#define _SC_NPROCESSORS_ONLN 58
long sysconf(int name);
#ifdef __cplusplus
}
#endif
