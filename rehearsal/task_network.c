/* LD_PRELOAD shim: the network of the Fargate stand-in (rehearsal/fargate_standin.py).
 *
 * On Fargate each task has its own network interface: a container binds 0.0.0.0:<its port>, and other tasks
 * connect to <that task's private IP>:<port>. Here every task is a process on this machine, which must listen
 * on loopback only and share its ports with everything else running. So this wraps bind(2) and connect(2):
 *   INFERSTACK_TASK_PORTS="5557=41234,..."   a bind to the IPv4 wildcard on container port 5557 becomes a bind
 *                                            to 127.0.0.1:41234 (the task's published port); a wildcard bind on
 *                                            any other port becomes 127.0.0.1 on that same port;
 *   INFERSTACK_TASK_ROUTES="10.0.1.7:5557=41234,..."  a connect to another task's private IP and container port
 *                                            goes to 127.0.0.1:41234 (where that task published it).
 * Every other bind and connect is passed through unchanged. Built on first use by the stand-in with:
 *     cc -shared -fPIC -O2 -o task_network.so rehearsal/task_network.c -ldl
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*socket_call)(int, const struct sockaddr *, socklen_t);

/* The published port for `port` in a "from=to,..." list whose entries are "<key>=<port>"; 0 when absent. */
static unsigned short lookup(const char *list, const char *key) {
    if (list == NULL) {
        return 0;
    }
    size_t key_length = strlen(key);
    const char *entry = list;
    while (*entry != '\0') {
        const char *end = strchr(entry, ',');
        size_t length = end ? (size_t)(end - entry) : strlen(entry);
        if (length > key_length && strncmp(entry, key, key_length) == 0 && entry[key_length] == '=') {
            long value = strtol(entry + key_length + 1, NULL, 10);
            return (value > 0 && value < 65536) ? (unsigned short)value : 0;
        }
        if (end == NULL) {
            break;
        }
        entry = end + 1;
    }
    return 0;
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static socket_call real_bind;
    if (real_bind == NULL) {
        real_bind = (socket_call)dlsym(RTLD_NEXT, "bind");
    }
    if (addr != NULL && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in in4;
        memcpy(&in4, addr, sizeof in4);
        if (in4.sin_addr.s_addr == htonl(INADDR_ANY)) {
            char key[8];
            snprintf(key, sizeof key, "%u", (unsigned)ntohs(in4.sin_port));
            unsigned short published = lookup(getenv("INFERSTACK_TASK_PORTS"), key);
            in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            if (published != 0 && in4.sin_port != 0) {
                in4.sin_port = htons(published);
            }
            return real_bind(fd, (const struct sockaddr *)&in4, sizeof in4);
        }
    } else if (addr != NULL && addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 in6;
        memcpy(&in6, addr, sizeof in6);
        if (IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr)) {
            in6.sin6_addr = in6addr_loopback;
            return real_bind(fd, (const struct sockaddr *)&in6, sizeof in6);
        }
    }
    return real_bind(fd, addr, len);
}

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    static socket_call real_connect;
    if (real_connect == NULL) {
        real_connect = (socket_call)dlsym(RTLD_NEXT, "connect");
    }
    if (addr != NULL && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in in4;
        memcpy(&in4, addr, sizeof in4);
        char host[INET_ADDRSTRLEN];
        char key[INET_ADDRSTRLEN + 8];
        if (inet_ntop(AF_INET, &in4.sin_addr, host, sizeof host) != NULL) {
            snprintf(key, sizeof key, "%s:%u", host, (unsigned)ntohs(in4.sin_port));
            unsigned short published = lookup(getenv("INFERSTACK_TASK_ROUTES"), key);
            if (published != 0) {
                in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                in4.sin_port = htons(published);
                return real_connect(fd, (const struct sockaddr *)&in4, sizeof in4);
            }
        }
    }
    return real_connect(fd, addr, len);
}
