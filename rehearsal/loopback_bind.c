/* LD_PRELOAD shim for the real-Triton test tier (rehearsal/triton_server.py).
 *
 * tritonserver 2.51's SageMaker front end always binds 0.0.0.0 (the binary has --sagemaker-port but no
 * --sagemaker-address). Tests must listen on loopback only, so this wraps bind(2): a bind to the IPv4 or
 * IPv6 wildcard address becomes a bind to 127.0.0.1 / ::1 on the same port; every other bind is passed
 * through unchanged. Built by `make .make/triton` (or on first use) with:
 *     cc -shared -fPIC -O2 -o .venv-triton/lib/loopback_bind.so rehearsal/loopback_bind.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static bind_fn real_bind;
    if (real_bind == NULL) {
        real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
    }
    if (addr != NULL && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in in4;
        memcpy(&in4, addr, sizeof in4);
        if (in4.sin_addr.s_addr == htonl(INADDR_ANY)) {
            in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
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
