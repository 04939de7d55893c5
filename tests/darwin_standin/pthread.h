/* stand-in for Darwin's <pthread.h>: pthread_setname_np names the calling thread only */
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
typedef struct _opaque_pthread_t* pthread_t;
pthread_t pthread_self(void);
int pthread_setname_np(const char* name);
#ifdef __cplusplus
}
#endif
