/* The native floor of the serving app's cycle (benchmarks/turnaround_floor.py): what a request path with no
 * interpreter on it reaches on the same cores, against the same emulated accelerator.
 *
 *   floor_server WORKERS BATCH_US DELAY_US
 *
 * WORKERS processes, each listening on a loopback port of its own (printed, one "port N" line per worker,
 * so a client splits its connections evenly, as the app's least-connections accept does). Each worker reads
 * HTTP/1.1 requests (head up to the blank line, then Content-Length bytes; nothing else is parsed), queues
 * them, runs a batch of up to 16 for BATCH_US microseconds (a timer: the accelerator is off the CPU) and
 * then writes one fixed JSON reply per request of the batch. The batching rules are the app's (batcher.py):
 * a full batch leaves at once; otherwise the queue delay counts from the oldest queued request's arrival,
 * or, when what is queued and the rows just answered fit one batch, from when the model came free.
 * Nothing here is the product: it bounds what the product could reach on this machine.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROWS 16
#define QUEUE 4096
#define MAX_FD 4096
#define ID_BATCH_TIMER (MAX_FD + 1)
#define ID_DELAY_TIMER (MAX_FD + 2)
#define ID_LISTEN (MAX_FD + 3)

static const char BODY[] =
    "{\"model_name\":\"model\",\"model_version\":\"1\",\"outputs\":[{\"name\":\"logits\",\"datatype\":\"FP32\","
    "\"shape\":[1,4],\"data\":[12.0,24.0,36.0,48.0]},{\"name\":\"label\",\"datatype\":\"BYTES\",\"shape\":[1],"
    "\"data\":[\"label_3\"]}]}";

typedef struct {
    char buf[16384];
    int len;
} conn_t;

static conn_t *conns[MAX_FD];
static int queue_fd[QUEUE];
static double queue_at[QUEUE];
static long head, tail; /* queued requests: [head, tail) */
static int batch[ROWS], batch_rows, running;
static long batch_us, delay_us;
static int batch_timer, delay_timer;
static char reply[1024];
static int reply_len;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void arm(int fd, long us) { /* 0 disarms */
    struct itimerspec t = {{0, 0}, {us / 1000000, (us % 1000000) * 1000}};
    timerfd_settime(fd, 0, &t, NULL);
}

static void start_batch(void) {
    batch_rows = 0;
    while (head < tail && batch_rows < ROWS) batch[batch_rows++] = queue_fd[head++ % QUEUE];
    running = 1;
    arm(delay_timer, 0);
    arm(batch_timer, batch_us);
}

/* The model is free: a batch now, or the delay timer for when it may leave. */
static void schedule(int just_answered) {
    if (tail - head >= ROWS) {
        start_batch();
        return;
    }
    if (head == tail) return;
    double from = queue_at[head % QUEUE];
    if (tail - head + just_answered <= ROWS) from = now(); /* the clients just answered may fill it */
    long left = (long)((from + delay_us / 1e6 - now()) * 1e6);
    if (left <= 0)
        start_batch();
    else
        arm(delay_timer, left);
}

/* Length of the first whole request in the connection's buffer, 0 if it is not all there, -1 if malformed. */
static int request_length(conn_t *c) {
    char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
    if (!end) return c->len == (int)sizeof c->buf ? -1 : 0;
    int body = 0;
    for (char *line = c->buf; line < end;) {
        char *next = memmem(line, end - line, "\r\n", 2);
        if (!next) next = end;
        if (next - line > 15 && strncasecmp(line, "content-length:", 15) == 0) body = atoi(line + 15);
        line = next + 2;
    }
    int need = (int)(end - c->buf) + 4 + body;
    if (body < 0 || need > (int)sizeof c->buf) return -1;
    return c->len >= need ? need : 0;
}

static void drop(int epoll, int fd) {
    epoll_ctl(epoll, EPOLL_CTL_DEL, fd, NULL);
    close(fd);
    free(conns[fd]);
    conns[fd] = NULL;
    for (long i = head; i < tail; i++) /* a closed connection's queued request is answered nowhere */
        if (queue_fd[i % QUEUE] == fd) queue_fd[i % QUEUE] = -1;
    for (int i = 0; i < batch_rows; i++)
        if (batch[i] == fd) batch[i] = -1;
}

static void __attribute__((noreturn)) serve(int listener) {
    int epoll = epoll_create1(0), one = 1;
    batch_timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    delay_timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN};
    ev.data.u64 = ID_BATCH_TIMER;
    epoll_ctl(epoll, EPOLL_CTL_ADD, batch_timer, &ev);
    ev.data.u64 = ID_DELAY_TIMER;
    epoll_ctl(epoll, EPOLL_CTL_ADD, delay_timer, &ev);
    ev.data.u64 = ID_LISTEN;
    epoll_ctl(epoll, EPOLL_CTL_ADD, listener, &ev);
    for (;;) {
        struct epoll_event events[256];
        int n = epoll_wait(epoll, events, 256, -1);
        for (int i = 0; i < n; i++) {
            unsigned long long id = events[i].data.u64, expirations;
            if (id == ID_LISTEN) {
                int fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK);
                if (fd < 0) continue;
                if (fd >= MAX_FD) {
                    close(fd);
                    continue;
                }
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                conns[fd] = calloc(1, sizeof(conn_t));
                ev.data.u64 = fd;
                epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &ev);
            } else if (id == ID_BATCH_TIMER) {
                /* A stale event (the timer re-armed since) reads nothing: the nonblocking read says so. */
                if (read(batch_timer, &expirations, 8) != 8) continue;
                running = 0;
                int answered = batch_rows, done[ROWS];
                memcpy(done, batch, sizeof done);
                schedule(answered); /* the next batch first, then the replies, as the app does */
                for (int k = 0; k < answered; k++)
                    if (done[k] >= 0 && write(done[k], reply, reply_len) != reply_len) drop(epoll, done[k]);
            } else if (id == ID_DELAY_TIMER) {
                if (read(delay_timer, &expirations, 8) != 8) continue;
                if (!running && head < tail) start_batch();
            } else {
                int fd = (int)id;
                conn_t *c = conns[fd];
                if (!c) continue;
                int got = read(fd, c->buf + c->len, sizeof c->buf - c->len);
                if (got <= 0) {
                    drop(epoll, fd);
                    continue;
                }
                c->len += got;
                int need;
                while ((need = request_length(c)) > 0) {
                    memmove(c->buf, c->buf + need, c->len - need);
                    c->len -= need;
                    if (tail - head == QUEUE) break; /* cannot happen with HTTP/1.1 clients: one each */
                    queue_at[tail % QUEUE] = now();
                    queue_fd[tail++ % QUEUE] = fd;
                    if (!running && tail - head >= ROWS)
                        start_batch();
                    else if (!running && tail - head == 1)
                        arm(delay_timer, delay_us);
                }
                if (need < 0) drop(epoll, fd);
            }
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: floor_server WORKERS BATCH_US DELAY_US\n");
        return 2;
    }
    int workers = atoi(argv[1]);
    batch_us = atol(argv[2]);
    delay_us = atol(argv[3]);
    if (workers < 1 || batch_us < 1 || delay_us < 0) {
        fprintf(stderr, "floor_server: WORKERS and BATCH_US at least 1, DELAY_US not negative\n");
        return 2;
    }
    reply_len = snprintf(reply, sizeof reply,
                         "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %zu\r\n\r\n%s",
                         strlen(BODY), BODY);
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int w = 0; w < workers; w++) {
        int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = 0};
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t size = sizeof address;
        if (bind(listener, (void *)&address, sizeof address) || listen(listener, 1024) ||
            getsockname(listener, (void *)&address, &size)) {
            perror("floor_server: listen");
            return 1;
        }
        printf("port %d\n", ntohs(address.sin_port));
        if (fork() == 0) serve(listener);
        close(listener);
    }
    while (wait(NULL) > 0) {
    }
    return 0;
}
