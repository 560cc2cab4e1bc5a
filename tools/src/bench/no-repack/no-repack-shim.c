// LD_PRELOAD shim: llama.cpp with weight repacking off (llama-cli's --no-repack), for node-llama-cpp,
// which does not expose use_extra_bufts. Wraps llama_model_default_params and clears the flag, so
// the model computes from the mmap in place instead of copying weights into repacked buffers.
// Built by build.sh against the llama.h of the llama.cpp release bundled in node-llama-cpp.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

// node-llama-cpp dlopen()s its addon, and libllama with it, locally: RTLD_NEXT does not reach it,
// so find the loaded libllama by name and look the symbol up there.
static int find_llama(struct dl_phdr_info * info, size_t size, void * data) {
    (void)size;
    if (info->dlpi_name && strstr(info->dlpi_name, "/libllama")) {
        *(const char **)data = info->dlpi_name;
        return 1;
    }
    return 0;
}

struct llama_model_params llama_model_default_params(void) {
    static struct llama_model_params (*real)(void) = NULL;
    if (!real) {
        const char * path = NULL;
        dl_iterate_phdr(find_llama, &path);
        void * h = path ? dlopen(path, RTLD_NOLOAD | RTLD_LAZY) : NULL;
        real = h ? (struct llama_model_params (*)(void))dlsym(h, "llama_model_default_params") : NULL;
        if (!real) {
            fprintf(stderr, "no-repack shim: llama_model_default_params not found\n");
            abort();
        }
    }
    struct llama_model_params p = real();
    p.use_extra_bufts = false;
    if (getenv("KAIL_NO_REPACK_VERBOSE")) fprintf(stderr, "no-repack shim: use_extra_bufts = false\n");
    return p;
}
