/*
 * Built only with CUDA=0 (or when nvcc is absent): the engine still links,
 * and --device cuda is refused with the reason.
 */

#include <stdio.h>

#include "pl_ops.h"


int
pl_cuda_available(void)
{
    return 0;
}


pl_backend_t *
pl_backend_cuda_create(int device, char *err, size_t errlen)
{
    (void) device;
    snprintf(err, errlen, "this build has no CUDA backend "
             "(nvcc was not found, or it was built with CUDA=0)");
    return NULL;
}
