/*
 * pl_client: the worker side of attaching to pagedllm-engine, blocking,
 * for programs that are not nginx (the engine tests' fake worker, the
 * engine benchmark).  The nginx module attaches without blocking inside
 * its event loop and checks every field it maps (its channel code); this
 * header only does the steps, and leaves the checks to its caller.
 *
 * Header-only (static inline), so nothing of it is built into the module.
 */

#ifndef PL_CLIENT_H
#define PL_CLIENT_H

#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "pl_proto.h"
#include "pl_ring.h"


/* A connected socket to the engine at path, or -1. */
static inline int
pl_client_connect(const char *path)
{
    struct sockaddr_un  sa = { .sun_family = AF_UNIX };
    int                 fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0) {
        return -1;
    }
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }

    return fd;
}


/*
 * Send pl_attach_t and wait up to timeout_ms for the hello: 0 with *hello
 * and fds[3] (memfd, submission doorbell, completion doorbell), -1 when
 * the answer does not come or is not a hello with three descriptors.
 */
static inline int
pl_client_attach(int fd, int timeout_ms, pl_hello_t *hello, int fds[3])
{
    pl_attach_t      a = { PL_PROTO_MAGIC, PL_PROTO_VERSION,
                           (uint32_t) getpid(), 0 };
    union {
        struct cmsghdr  h;
        char            buf[CMSG_SPACE(3 * sizeof(int))];
    }                ctl;
    struct iovec     iov = { hello, sizeof(*hello) };
    struct msghdr    msg = { 0 };
    struct cmsghdr  *cm;
    struct pollfd    p = { fd, POLLIN, 0 };

    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof(ctl.buf);

    if (write(fd, &a, sizeof(a)) != (ssize_t) sizeof(a)
        || poll(&p, 1, timeout_ms) != 1
        || recvmsg(fd, &msg, MSG_CMSG_CLOEXEC) != (ssize_t) sizeof(*hello))
    {
        return -1;
    }

    cm = CMSG_FIRSTHDR(&msg);
    if (cm == NULL || cm->cmsg_type != SCM_RIGHTS
        || cm->cmsg_len != CMSG_LEN(3 * sizeof(int)))
    {
        return -1;
    }
    memcpy(fds, CMSG_DATA(cm), 3 * sizeof(int));

    return 0;
}


/*
 * Map the region of hello from memfd (closed here either way) and attach
 * its two rings: the region, or NULL when it cannot be mapped.
 */
static inline void *
pl_client_map(const pl_hello_t *hello, int memfd, pl_ring_t *sub,
    pl_ring_t *comp)
{
    void             *region;
    pl_region_hdr_t  *h;

    region = mmap(NULL, hello->region_size, PROT_READ | PROT_WRITE,
                  MAP_SHARED, memfd, 0);
    close(memfd);
    if (region == MAP_FAILED) {
        return NULL;
    }

    h = region;
    pl_ring_attach_producer(sub, (uint8_t *) region + h->sub_offset,
                            h->sub_size);
    pl_ring_attach_consumer(comp, (uint8_t *) region + h->comp_offset,
                            h->comp_size);

    return region;
}

#endif /* PL_CLIENT_H */
