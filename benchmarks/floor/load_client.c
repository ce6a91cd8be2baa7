/* A native load generator for benchmarks/turnaround_floor.py, cheap enough not to be what it measures.
 *
 *   load_client PORTS CONNECTIONS SECONDS REQUESTS [RATE [WARMUP [ORDER]]]
 *
 * PORTS: comma-separated loopback ports, the connections spread over them in turn. REQUESTS: a file of whole
 * HTTP/1.1 requests, each followed by a NUL byte, sent in turn. Without RATE, a closed loop: each connection
 * sends its next request as soon as its reply has arrived. With RATE (requests per second), an open system:
 * a request falls due every 1 / RATE seconds whatever the server does, goes out on the first connection with
 * nothing in flight (HTTP/1.1, one request at a time each), and its latency counts from when it was due. ORDER says
 * which idle connection that is: lifo (the default), the one whose reply came last, as urllib3's and Go's net/http
 * connection pools reuse theirs; fifo, the one idle longest, so the requests go round the connections in turn, as
 * a client whose users each keep a connection and a schedule of their own.
 * A closed loop of WARMUP seconds (default 1; RATE 0 is a closed loop) first warms the server up, on the same
 * connections the measured run then uses: a run that opened its connections as its schedule started would time the
 * server accepting them all at once (the app: 256 accepts in the first milliseconds, a p99 of 22 ms in its first
 * 100 ms), which a client with its connections open never sees. Prints one line:
 *   requests=N seconds=S p50_ms=X p99_ms=Y late=L warmup=W reconnects=R refused=F
 * (requests and the percentiles: 2xx replies only; refused: the measured run's other replies, a server's 503s
 * when it sheds load, which would otherwise pass for fast answers; late: requests sent more than 1 ms after they
 * were due, for want of a free connection or because this process was held up; warmup: the warm-up's replies
 * of any status, which a caller counting the server's CPU includes; reconnects: the measured run's replies that said
 * "connection: close", after which the connection's next request went on a new one).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNECTIONS 1024
#define MAX_REQUESTS 4096

typedef struct {
    int fd, next;
    char buf[65536];
    int len;
    double due;
} conn_t;

static char *requests[MAX_REQUESTS];
static int request_len[MAX_REQUESTS], request_count;
static int ports[64], port_count;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Length of the first whole reply in the buffer; 0: not all there yet; -1: no Content-Length. */
static int reply_length(conn_t *c) {
    char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
    if (!end) return 0;
    for (char *line = c->buf; line < end;) {
        char *next = memmem(line, end - line, "\r\n", 2);
        if (!next) next = end;
        if (next - line > 15 && strncasecmp(line, "content-length:", 15) == 0) {
            int need = (int)(end - c->buf) + 4 + atoi(line + 15);
            return c->len >= need ? need : 0;
        }
        line = next + 2;
    }
    return -1;
}

static long reconnects, refused;

static void open_connection(int epoll, conn_t *c, int index) {
    int one = 1;
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    c->len = 0;
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons(ports[index % port_count])};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(c->fd, (void *)&address, sizeof address)) {
        perror("load_client: connect");
        exit(1);
    }
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = index};
    epoll_ctl(epoll, EPOLL_CTL_ADD, c->fd, &ev);
}

/* A reply saying "connection: close" (the app evens out its workers' connections that way): the next request
 * goes on a new connection, as an HTTP client or a load balancer would send it. */
static int says_close(conn_t *c, int length) {
    char *end = memmem(c->buf, length, "\r\n\r\n", 4);
    for (char *line = c->buf; end && line < end;) {
        char *next = memmem(line, end - line, "\r\n", 2);
        if (!next) next = end;
        if (next - line >= 17 && strncasecmp(line, "connection: close", 17) == 0) return 1;
        line = next + 2;
    }
    return 0;
}

static void send_next(conn_t *c, double due) {
    int k = c->next++ % request_count;
    c->due = due;
    if (write(c->fd, requests[k], request_len[k]) != request_len[k]) {
        perror("load_client: write");
        exit(1);
    }
}

static conn_t conns[MAX_CONNECTIONS];
static int epoll = -1, fifo = 0;

/* The idle connections: a ring, taken from its tail (lifo) or its head (fifo). */
typedef struct {
    int slot[MAX_CONNECTIONS], head, count;
} idle_t;

static void put_idle(idle_t *idle, int i) { idle->slot[(idle->head + idle->count++) % MAX_CONNECTIONS] = i; }

static int take_idle(idle_t *idle) {
    if (!fifo) return idle->slot[(idle->head + --idle->count) % MAX_CONNECTIONS];
    int i = idle->slot[idle->head];
    idle->head = (idle->head + 1) % MAX_CONNECTIONS;
    idle->count--;
    return i;
}

/* One run over the connections main opened, each idle at its start and at its end; fills latencies (seconds) and
 * returns the run's length in seconds. */
static double run(int connections, double seconds, double rate, double *latencies, long *count, long *late) {
    static idle_t idle;
    idle.head = idle.count = 0;
    *count = *late = 0;
    for (int i = 0; i < connections; i++) put_idle(&idle, i);
    double start = now(), stop = start + seconds;
    long issued = 0, backlog = 0;
    if (rate <= 0) {
        for (int i = 0; i < connections; i++) send_next(&conns[i], now());
        idle.count = 0;
    }
    int open = connections;
    while (open) {
        int wait_ms = 1000;
        if (rate > 0) {
            double t = now();
            while (start + issued / rate <= t && start + issued / rate < stop) issued++, backlog++;
            while (backlog && idle.count) {
                double due = start + (issued - backlog) / rate;
                backlog--;
                if (t - due > 0.001) (*late)++;
                send_next(&conns[take_idle(&idle)], due);
            }
            if (t >= stop && !backlog && idle.count == connections) break;
            wait_ms = 0; /* the schedule needs sends finer than epoll's milliseconds: this core is the client's */
        }
        struct epoll_event events[MAX_CONNECTIONS];
        int n = epoll_wait(epoll, events, MAX_CONNECTIONS, wait_ms);
        for (int j = 0; j < n; j++) {
            conn_t *c = &conns[events[j].data.u32];
            int got = read(c->fd, c->buf + c->len, sizeof c->buf - c->len);
            if (got <= 0) {
                fprintf(stderr, "load_client: the server closed a connection\n");
                exit(1);
            }
            c->len += got;
            int need;
            while ((need = reply_length(c)) > 0) {
                double t = now();
                if (c->len >= 10 && memcmp(c->buf, "HTTP/1.1 2", 10) == 0)
                    latencies[(*count)++] = t - c->due;
                else
                    refused++;
                int closing = says_close(c, need);
                memmove(c->buf, c->buf + need, c->len - need);
                c->len -= need;
                if (closing) { /* reopened even after the schedule's end: the next run uses it */
                    epoll_ctl(epoll, EPOLL_CTL_DEL, c->fd, NULL);
                    close(c->fd);
                    open_connection(epoll, c, (int)(c - conns));
                    reconnects++;
                }
                if (rate > 0)
                    put_idle(&idle, (int)(c - conns));
                else if (t < stop)
                    send_next(c, t);
                else
                    open--; /* the closed loop's end: this connection sends no more, and stays open */
                if (closing) break;
            }
            if (need < 0) {
                fprintf(stderr, "load_client: a reply without Content-Length\n");
                exit(1);
            }
        }
    }
    return now() - start;
}

int main(int argc, char **argv) {
    if (argc < 5 || argc > 8) {
        fprintf(stderr, "usage: load_client PORTS CONNECTIONS SECONDS REQUESTS [RATE [WARMUP [ORDER]]]\n");
        return 2;
    }
    if (argc == 8 && strcmp(argv[7], "lifo") && strcmp(argv[7], "fifo")) {
        fprintf(stderr, "load_client: ORDER is lifo or fifo, not %s\n", argv[7]);
        return 2;
    }
    fifo = argc == 8 && !strcmp(argv[7], "fifo");
    for (char *p = strtok(argv[1], ","); p && port_count < 64; p = strtok(NULL, ",")) ports[port_count++] = atoi(p);
    int connections = atoi(argv[2]);
    double seconds = atof(argv[3]), rate = argc >= 6 ? atof(argv[5]) : 0, warmup_s = argc >= 7 ? atof(argv[6]) : 1.0;
    if (!port_count || connections < 1 || connections > MAX_CONNECTIONS || !(seconds > 0) || !(rate >= 0) ||
        !(warmup_s > 0)) {
        fprintf(stderr, "load_client: PORTS, 1 to %d CONNECTIONS, SECONDS > 0, RATE >= 0, WARMUP > 0\n",
                MAX_CONNECTIONS);
        return 2;
    }
    FILE *file = fopen(argv[4], "rb");
    if (!file) {
        perror("load_client: REQUESTS");
        return 2;
    }
    static char data[1 << 24];
    size_t size = fread(data, 1, sizeof data, file);
    fclose(file);
    for (size_t i = 0; i < size && request_count < MAX_REQUESTS;) {
        char *end = memchr(data + i, 0, size - i);
        if (!end) break;
        requests[request_count] = data + i;
        request_len[request_count] = (int)(end - (data + i));
        i += request_len[request_count++] + 1;
    }
    if (!request_count) {
        fprintf(stderr, "load_client: no NUL-terminated request in %s\n", argv[4]);
        return 2;
    }
    long capacity = (long)((rate > 0 ? rate : 200000) * seconds * 1.5) + 1000000;
    double *latencies = malloc(capacity * sizeof(double));
    long count, late;
    epoll = epoll_create1(0);
    for (int i = 0; i < connections; i++) {
        conns[i].next = i * 7;
        open_connection(epoll, &conns[i], i);
    }
    run(connections, warmup_s, 0, latencies, &count, &late); /* warm-up, closed loop */
    long warmup = count + refused; /* every reply, for a caller counting the server's CPU per request */
    refused = reconnects = 0;      /* the warm-up's are not the measured run's */
    double elapsed = run(connections, seconds, rate, latencies, &count, &late);
    if (!count) {
        fprintf(stderr, "load_client: no 2xx reply (%ld refused)\n", refused);
        return 1;
    }
    qsort(latencies, count, sizeof(double), by_value);
    printf("requests=%ld seconds=%.4f p50_ms=%.3f p99_ms=%.3f late=%ld warmup=%ld reconnects=%ld refused=%ld\n", count,
           elapsed, latencies[count / 2] * 1e3, latencies[(long)(count * 0.99)] * 1e3, late, warmup, reconnects,
           refused);
    return 0;
}
