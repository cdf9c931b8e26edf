/*
 * The engine's socket against hostile or careless clients, with the real
 * pagedllm-engine and fake workers (fake_worker.h): the socket file never
 * exists with a mode wider than --socket-mode, even under umask 0; an
 * attach over --max-workers is refused with a logged reason and no region
 * made for it; a flood of connections that never say hello (as many as
 * the descriptor limit allows, up to 20,000) neither piles up in the
 * engine nor keeps a real worker out, before or while the worker
 * attaches, also when the engine's descriptor limit is far below the
 * flood; with no descriptor left at all, a newcomer is closed at once
 * rather than left in the backlog.
 */

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#define FW_WAIT_MS    (10000 * fw_time_scale())

#include "fake_worker.h"

#define MODE_ROUNDS   8
#define FLOOD_MAX     20000
#define CAP           2
#define OVER_CAP      10
#define MAX_PENDING   64    /* the engine's PL_IPC_MAX_PENDING */
#define FLOOD_HOLD    1000
#define FLOOD_ATTACHES 5

static int  finished;


static void
take_record(uint32_t type, const uint8_t *buf, uint32_t len)
{
    (void) buf;
    (void) len;
    finished += type == PL_REC_FINISH;
}


static int
is_finished(int id)
{
    (void) id;
    return finished > 0;
}


/* One greedy request of 4 tokens through w; 0 when its FINISH came. */
static int
serve_one(fw_t *w, uint64_t id)
{
    static const int32_t  prompt[] = { 1, 2, 3, 4 };
    pl_rec_submit_t       r = { .req_id = id, .max_tokens = 4,
                                .flags = PL_SUBMIT_IGNORE_EOS,
                                .top_p = 1, .n_prompt = 4 };

    finished = 0;
    if (fw_submit(w, &r, prompt, NULL, NULL) != 0) {
        return -1;
    }

    return fw_wait(w, is_finished, 0, 1);
}


/* Lines of /proc/PID/NAME containing what. */
static int
count_in_proc(const char *name, const char *what)
{
    char   path[64], line[512];
    FILE  *f;
    int    n = 0;

    snprintf(path, sizeof(path), "/proc/%d/%s", (int) fw_pid, name);
    f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f)) {
        n += strstr(line, what) != NULL;
    }
    fclose(f);

    return n;
}


/* Descriptors the engine holds. */
static int
engine_fds(void)
{
    char            path[64];
    DIR            *d;
    struct dirent  *de;
    int             n = 0;

    snprintf(path, sizeof(path), "/proc/%d/fd", (int) fw_pid);
    d = opendir(path);
    if (d == NULL) {
        return -1;
    }
    while ((de = readdir(d)) != NULL) {
        n += de->d_name[0] != '.';
    }
    closedir(d);

    return n;
}


/* The lowest descriptor number the engine has free: with its limit
   there, its next open fails. */
static int
engine_lowest_free_fd(void)
{
    char            path[64];
    unsigned char   used[1024] = { 0 };
    DIR            *d;
    struct dirent  *de;
    int             fd;

    snprintf(path, sizeof(path), "/proc/%d/fd", (int) fw_pid);
    d = opendir(path);
    if (d == NULL) {
        return -1;
    }
    while ((de = readdir(d)) != NULL) {
        fd = atoi(de->d_name);
        if (de->d_name[0] != '.' && fd < (int) sizeof(used)) {
            used[fd] = 1;
        }
    }
    closedir(d);

    for (fd = 0; fd < (int) sizeof(used) && used[fd]; fd++) {
        /* the first hole */
    }

    return fd;
}


static int
log_has(const char *what)
{
    char   line[512];
    FILE  *f = fopen(fw_log, "r");
    int    found = 0;

    if (f == NULL) {
        return 0;
    }
    while (!found && fgets(line, sizeof(line), f)) {
        found = strstr(line, what) != NULL;
    }
    fclose(f);

    return found;
}


/* ---- the socket's mode from its first instant ---- */


/* A child that stats the socket path as fast as it can from before the
   engine starts until a while after the file appears: exit 0 when every
   mode it saw was within 0600, 1 when one was wider, 2 when none came. */
static pid_t
mode_watcher(void)
{
    pid_t        pid = fork();
    struct stat  st;
    uint64_t     until;
    int          seen = 0, wide = 0;

    if (pid != 0) {
        return pid;
    }

    until = fw_now_ms() + FW_START_MS;
    while (fw_now_ms() < until && seen < 100000) {
        if (stat(fw_sock, &st) == 0) {
            seen++;
            wide |= (st.st_mode & 0777 & ~0600) != 0;
        }
    }

    _exit(seen == 0 ? 2 : wide);
}


static void
test_socket_mode(const char *build)
{
    static const char *const  args[] = { "--socket-mode", "0600", NULL };
    mode_t                    old = umask(0);
    struct stat               st;
    int                       i, status, bad = 0;
    pid_t                     watcher;

    for (i = 0; i < MODE_ROUNDS; i++) {
        unlink(fw_sock);
        watcher = mode_watcher();
        if (fw_engine_start(build, args, NULL) != 0) {
            bad++;
            kill(watcher, SIGKILL);
        }
        waitpid(watcher, &status, 0);
        bad += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
        if (i == 0) {
            memset(&st, 0, sizeof(st));
            stat(fw_sock, &st);
            is_int(st.st_mode & 0777, 0600, "the socket has mode 0600 "
                   "under umask 0");
        }
        fw_engine_stop();
    }

    umask(old);
    is_int(bad, 0, "in %d starts under umask 0 the socket was never seen "
           "wider than 0600", MODE_ROUNDS);
}


/* ---- --max-workers ---- */


static void
test_cap(const char *build)
{
    static const char *const  args[] = { "--max-workers", "2", NULL };
    fw_t                      w[CAP], extra;
    int                       i, refused = 0;
    uint64_t                  until;

    if (!ok(fw_engine_start(build, args, NULL) == 0,
            "the engine starts with --max-workers %d", CAP))
    {
        fw_show_log();
        return;
    }

    for (i = 0; i < CAP; i++) {
        if (!ok(fw_attach(&w[i], take_record) == 0, "worker %d attaches",
                i))
        {
            fw_engine_stop();
            return;
        }
    }

    for (i = 0; i < OVER_CAP; i++) {
        if (fw_attach(&extra, take_record) != 0) {
            refused++;
        } else {
            fw_detach(&extra);
        }
    }

    is_int(refused, OVER_CAP, "every attach over the cap is refused");
    ok(log_has("attach refused: 2 workers are attached, --max-workers is 2"),
       "the engine logs why it refused");
    is_int(count_in_proc("maps", "pagedllm-region"), CAP,
           "the engine maps a region for the %d attached workers only", CAP);
    is_int(fw_stats(&w[0]).workers, CAP, "it counts %d workers", CAP);

    fw_detach(&w[1]);
    until = fw_now_ms() + FW_WAIT_MS;
    while (fw_stats(&w[0]).workers != CAP - 1 && fw_now_ms() < until) {
        usleep(10000);
    }

    if (ok(fw_attach(&w[1], take_record) == 0,
           "a worker attaches once one has left"))
    {
        ok(serve_one(&w[1], 1) == 0, "and is served");
        fw_detach(&w[1]);
    }
    fw_detach(&w[0]);

    ok(fw_engine_stop() == 0, "the engine stops cleanly");
}


/* ---- a flood of connections that never say hello ---- */


/* Connect n sockets that stay silent into fds; how many connected. */
static int
flood(int *fds, int n)
{
    struct sockaddr_un  sa = { .sun_family = AF_UNIX };
    uint64_t            until = fw_now_ms() + FW_WAIT_MS;
    int                 i = 0, fd;

    strcpy(sa.sun_path, fw_sock);

    while (i < n && fw_now_ms() < until) {
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            break;
        }
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0) {
            close(fd);
            if (errno != EAGAIN) {
                break;
            }
            usleep(200);        /* the backlog is full: let it drain */
            continue;
        }
        fds[i++] = fd;
    }

    return i;
}


static void
close_all(int *fds, int n)
{
    int  i;

    for (i = 0; i < n; i++) {
        close(fds[i]);
    }
}


/* n silent connections, then a worker that attaches and is served;
   the descriptors the engine holds then, while they are all open. */
static int
flood_then_serve(int *fds, int n, const char *what)
{
    fw_t  w;
    int   got = flood(fds, n), held = -1;

    is_int(got, n, "%s: %d silent connections made", what, n);

    if (ok(fw_attach(&w, take_record) == 0, "%s: a worker attaches after "
           "them", what))
    {
        ok(serve_one(&w, 2) == 0, "%s: and is served", what);
        held = engine_fds();
        fw_detach(&w);
    } else {
        fw_show_log();
    }

    close_all(fds, got);
    usleep(300000);             /* the engine closes its ends */

    return held;
}


/* A child that keeps connecting silent sockets, holding the last
   FLOOD_HOLD open, until it is killed. */
static pid_t
flooder(void)
{
    static int  held[FLOOD_HOLD];
    pid_t       pid = fork();
    int         i;

    if (pid != 0) {
        return pid;
    }

    for (i = 0; i < FLOOD_HOLD; i++) {
        held[i] = -1;
    }
    for (i = 0; ; i = (i + 1) % FLOOD_HOLD) {
        if (held[i] >= 0) {
            close(held[i]);
        }
        held[i] = -1;
        flood(&held[i], 1);
    }
}


/* Workers attach and are served while the flood goes on. */
static void
test_ongoing_flood(void)
{
    pid_t  child = flooder();
    fw_t   w;
    int    i, served = 0;

    usleep(200000);
    for (i = 0; i < FLOOD_ATTACHES; i++) {
        if (fw_attach(&w, take_record) == 0) {
            served += serve_one(&w, 10 + (uint64_t) i) == 0;
            fw_detach(&w);
        }
    }

    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    usleep(300000);             /* the engine closes its ends */

    is_int(served, FLOOD_ATTACHES, "during a flood %d workers in turn "
           "attach and are served", FLOOD_ATTACHES);
}


/* Every descriptor the engine may open is taken, by an attached worker
   among others: a newcomer is accepted and closed on the spare one, not
   left hanging in the backlog, and the worker is still served. */
static void
test_no_fd_left(void)
{
    struct rlimit  rl;
    fw_t           w;
    int            fd;

    if (!ok(fw_attach(&w, take_record) == 0, "a worker attaches")) {
        return;
    }

    usleep(200000);     /* the engine closes its copy of the memfd */
    rl.rlim_cur = rl.rlim_max = (rlim_t) engine_lowest_free_fd();
    ok(prlimit(fw_pid, RLIMIT_NOFILE, &rl, NULL) == 0,
       "the engine's descriptor limit lowered to its lowest free one, %llu",
       (unsigned long long) rl.rlim_cur);

    fd = fw_connect();
    ok(fd >= 0 && fw_closed(fd), "a newcomer is closed");
    if (fd >= 0) {
        close(fd);
    }
    ok(log_has("a connection refused"), "the engine logs it");
    ok(serve_one(&w, 3) == 0, "the attached worker is still served");

    fw_detach(&w);
}


static void
test_flood(const char *build)
{
    static const char *const  args[] = { NULL };
    struct rlimit             rl;
    int                      *fds, n, base, held;

    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    n = rl.rlim_cur > FLOOD_MAX + 64 ? FLOOD_MAX : (int) rl.rlim_cur - 64;
    diag("flood of %d connections (descriptor limit %llu)", n,
         (unsigned long long) rl.rlim_cur);

    fds = malloc((size_t) n * sizeof(int));
    if (!ok(fds != NULL && fw_engine_start(build, args, NULL) == 0,
            "the engine starts"))
    {
        free(fds);
        return;
    }

    base = engine_fds();
    held = flood_then_serve(fds, n, "flood");
    ok(held >= 0 && held <= base + MAX_PENDING + 4, "the engine held at "
       "most %d of them at once (%d descriptors with the worker, %d "
       "before)", MAX_PENDING, held, base);
    ok(log_has("connections closed before their attach to make room"),
       "the engine logs the connections it closed");

    test_ongoing_flood();

    /* the engine's own limit far below the flood: accept() and the new
       worker's doorbells find no descriptor until silent ones make way */
    rl.rlim_cur = rl.rlim_max = (rlim_t) engine_fds() + 8;
    ok(prlimit(fw_pid, RLIMIT_NOFILE, &rl, NULL) == 0,
       "the engine's descriptor limit lowered to %llu",
       (unsigned long long) rl.rlim_cur);
    flood_then_serve(fds, 500, "low limit");

    test_no_fd_left();

    ok(fw_engine_stop() == 0, "the engine stops cleanly");
    free(fds);
}


int
main(void)
{
    const char  *build = getenv("PAGEDLLM_BUILD");

    if (build == NULL) {
        build = "build";
    }

    if (fw_setup("attach") != 0) {
        ok(0, "temp dir");
        return done_testing();
    }

    test_socket_mode(build);
    test_cap(build);
    test_flood(build);

    fw_cleanup();

    return done_testing();
}
