/*
 * route_local: what telling a connection's address local costs, the kernel's way against the
 * list's. The engine asks the kernel at each connection (src/engine/route_query.c's
 * mend__route_local, called here as http_addr.c calls it: a netlink RTM_GETROUTE for the
 * address, TCP and port 80, a send and a read on a socket kept open); getifaddrs (a dump of
 * every interface's addresses) is the list's way. This times both, N times each, on this
 * machine's interfaces, and prints microseconds per call. Built against the engine's file:
 *   cc -O2 -std=c11 -D_DEFAULT_SOURCE -Isrc/engine -o /tmp/route_local bench/route_local.c \
 *     src/engine/route_query.c && /tmp/route_local
 * Must never: change a route or an address.
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "route_query.h"

/* The 16 bytes mend__route_local takes: an IPv4 address as its IPv4-mapped IPv6 form. */
static void mapped(const struct in_addr *v4, unsigned char a[16]) {
  memset(a, 0, 10);
  a[10] = a[11] = 0xff;
  memcpy(a + 12, v4, 4);
}

/* kept: the socket kept between queries, plus 1, as the engine keeps it (the query closes it
 * after a failure and sets it 0, and opens another at the next); NULL: one opened and closed
 * for this query alone. */
static int route_local(int *kept, const unsigned char a[16]) {
  static unsigned seq;
  int own = 0;
  int *fd = kept ? kept : &own;
  int out = mend__route_local(fd, &seq, a, htons(80));
  if (!kept && own) close(own - 1);
  return out;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 100000;
  struct in_addr v4;
  unsigned char own[16], other[16], own6[16];
  inet_pton(AF_INET, "127.0.0.1", &v4);
  struct ifaddrs *first;
  if (getifaddrs(&first) == 0) {   /* an interface's own IPv4 address, if any but loopback */
    for (struct ifaddrs *i = first; i; i = i->ifa_next)
      if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
          ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr != v4.s_addr) {
        v4 = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
        break;
      }
    freeifaddrs(first);
  }
  mapped(&v4, own);
  inet_pton(AF_INET, "192.0.2.77", &v4);   /* TEST-NET-1: routed away (or unreachable) */
  mapped(&v4, other);
  inet_pton(AF_INET6, "::1", own6);
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE) + 1;
  if (fd <= 0 || route_local(&fd, own) != 1 || route_local(&fd, other) == 1 ||
      route_local(&fd, own6) != 1 || route_local(NULL, own) != 1) {
    fprintf(stderr, "route_local: the kernel's answers are not as expected\n");
    return 1;
  }
  double t0 = now();
  for (int k = 0; k < n; k++) route_local(&fd, own);
  double t1 = now();
  for (int k = 0; k < n; k++) route_local(&fd, other);
  double t2 = now();
  for (int k = 0; k < n; k++) route_local(&fd, own6);
  double t3 = now();
  for (int k = 0; k < n; k++) route_local(NULL, own);
  double t4 = now();
  for (int k = 0; k < n; k++) {
    struct ifaddrs *l;
    if (getifaddrs(&l) == 0) freeifaddrs(l);
  }
  double t5 = now();
  printf("route query, kept socket, an own IPv4 address:  %.2f us\n", (t1 - t0) / n * 1e6);
  printf("route query, kept socket, another IPv4 address: %.2f us\n", (t2 - t1) / n * 1e6);
  printf("route query, kept socket, ::1:                  %.2f us\n", (t3 - t2) / n * 1e6);
  printf("route query, a socket of its own:               %.2f us\n", (t4 - t3) / n * 1e6);
  printf("getifaddrs:                                     %.2f us\n", (t5 - t4) / n * 1e6);
  if (fd > 0) close(fd - 1);
  return 0;
}
