/*
 * --block-size against the backend: which KV block sizes each backend
 * kind takes (pl_block_size_ok: the CPU any size, the CUDA kernels powers
 * of two up to 1024), and pagedllm-engine refusing another at start with
 * a message naming the flag and the sizes the backend takes, and the
 * usage exit status (2), never an abort.  The engine runs with a model
 * folder that does not exist: the check comes before anything is opened,
 * so the refusals need no model and no GPU; an accepted size then fails
 * on the model, without a word about the block size.
 */

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pl_ops.h"
#include "tap.h"

typedef struct {
    int   status;        /* exit status; -1: killed by a signal */
    char  err[4096];     /* its stderr, cut to fit */
} run_t;


/* BUILD/pagedllm-engine with these --device and --block-size values */
static int
run_engine(const char *build, const char *device, const char *size,
    run_t *r)
{
    char     engine[4096];
    int      fd[2], st;
    size_t   n = 0;
    ssize_t  got;
    pid_t    pid;

    snprintf(engine, sizeof(engine), "%s/pagedllm-engine", build);
    if (pipe(fd) != 0) {
        return -1;
    }
    pid = fork();
    if (pid < 0) {
        return -1;
    }
    if (pid == 0) {
        dup2(fd[1], STDERR_FILENO);
        close(fd[0]);
        close(fd[1]);
        execl(engine, engine, "--model", "/nonexistent/pagedllm-model",
              "--listen", "/nonexistent/pagedllm.sock", "--device", device,
              "--block-size", size, (char *) NULL);
        _exit(127);
    }
    close(fd[1]);
    while (n + 1 < sizeof(r->err)
           && (got = read(fd[0], r->err + n, sizeof(r->err) - 1 - n)) > 0)
    {
        n += (size_t) got;
    }
    r->err[n] = '\0';
    close(fd[0]);
    if (waitpid(pid, &st, 0) != pid) {
        return -1;
    }
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return 0;
}


/* the engine refuses size on device: status 2, the flag, the value and
   the sizes named */
static void
refused(const char *build, const char *device, const char *kind,
    const char *size)
{
    run_t        r;
    char         want[128];
    const char  *sizes;

    pl_block_size_ok(kind, 0, &sizes);
    if (!ok(run_engine(build, device, size, &r) == 0,
            "engine runs (--device %s --block-size %s)", device, size))
    {
        return;
    }
    is_int(r.status, 2, "--device %s --block-size %s: usage exit status",
           device, size);
    snprintf(want, sizeof(want), "--block-size %s is not supported by the "
             "%s backend, which takes %s", size, kind, sizes);
    if (!ok(strstr(r.err, want) != NULL,
            "--device %s --block-size %s: the message names the flag and "
            "the %s backend's sizes", device, size, kind))
    {
        diag("stderr: %s", r.err);
    }
}


/* the engine takes size on device: it goes on to the model (which does
   not exist, or on a machine without a GPU to the device), and no word
   about the block size */
static void
accepted(const char *build, const char *device, const char *size)
{
    run_t  r;

    if (!ok(run_engine(build, device, size, &r) == 0,
            "engine runs (--device %s --block-size %s)", device, size))
    {
        return;
    }
    ok(r.status != 0 && r.status != 2 && r.status != -1,
       "--device %s --block-size %s: past the check, fails later (status "
       "%d), no crash", device, size, r.status);
    if (!ok(strstr(r.err, "--block-size") == NULL,
            "--device %s --block-size %s: no block-size error", device,
            size))
    {
        diag("stderr: %s", r.err);
    }
}


static void
query_cases(void)
{
    const char  *sizes;
    int          n, all = 1, pow2 = 1;

    for (n = 1; n <= 1024; n++) {
        all &= pl_block_size_ok("cpu", n, &sizes);
        pow2 &= pl_block_size_ok("cuda", n, &sizes) == ((n & (n - 1)) == 0);
    }
    ok(all, "cpu takes every block size from 1 to 1024");
    is_str(sizes, "powers of two from 1 to 1024", "cuda's sizes in words");
    ok(pow2, "cuda takes the powers of two from 1 to 1024, nothing else "
       "in that range");
    ok(!pl_block_size_ok("cuda", 2048, &sizes), "cuda refuses 2048");
    ok(!pl_block_size_ok("cuda", 0, &sizes), "cuda refuses 0");
    ok(!pl_block_size_ok("cpu", 0, &sizes), "cpu refuses 0");
    ok(!pl_block_size_ok("cuda", -16, &sizes), "cuda refuses -16");
}


int
main(void)
{
    const char  *build = getenv("PAGEDLLM_BUILD");

    if (build == NULL) {
        build = "build";
    }
    signal(SIGPIPE, SIG_IGN);
    query_cases();
    refused(build, "cuda", "cuda", "12");
    refused(build, "cuda", "cuda", "3");
    refused(build, "cuda", "cuda", "100");
    if (pl_cuda_available()) {
        refused(build, "auto", "cuda", "24");
    } else {
        accepted(build, "auto", "24");
    }
    accepted(build, "cpu", "12");
    accepted(build, "cpu", "3");
    accepted(build, "cuda", "16");
    accepted(build, "cuda", "1");
    return done_testing();
}
