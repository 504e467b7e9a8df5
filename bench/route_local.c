/*
 * route_local: what telling a connection's address local costs, the kernel's way against the
 * list's. http_addr.c asks the kernel at each connection (a netlink RTM_GETROUTE for the
 * address: a send and a read on a socket kept open); it read getifaddrs (a dump of every interface's
 * addresses) once every 5 s before. This times both, N times each, on this machine's
 * interfaces, and prints microseconds per call. The query here is the same request as
 * http_addr.c's route_local, written again: that file lives inside the engine's HTTP state.
 *   cc -O2 -std=c11 -D_DEFAULT_SOURCE -o /tmp/route_local bench/route_local.c && /tmp/route_local
 * Must never: change a route or an address.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* kept: a socket to use (-1: one opened and closed for the query) */
static int route_local(int kept, int family, const void *addr) {
  size_t alen = family == AF_INET ? 4 : 16;
  struct {
    struct nlmsghdr nh;
    struct rtmsg rt;
    unsigned char attr[RTA_SPACE(16)];
  } req;
  memset(&req, 0, sizeof req);
  req.nh.nlmsg_len = (unsigned)(NLMSG_LENGTH(sizeof req.rt) + RTA_LENGTH(alen));
  req.nh.nlmsg_type = RTM_GETROUTE;
  req.nh.nlmsg_flags = NLM_F_REQUEST;
  req.nh.nlmsg_seq = 1;
  req.rt.rtm_family = (unsigned char)family;
  req.rt.rtm_dst_len = (unsigned char)(alen * 8);
  struct rtattr *dst = (struct rtattr *)req.attr;
  dst->rta_type = RTA_DST;
  dst->rta_len = (unsigned short)RTA_LENGTH(alen);
  memcpy(RTA_DATA(dst), addr, alen);
  int fd = kept >= 0 ? kept : socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) return -errno;
  struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
  if (sendto(fd, &req, req.nh.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0) {
    if (kept < 0) close(fd);
    return -errno;
  }
  union { struct nlmsghdr nh; unsigned char b[8192]; } buf;
  ssize_t got = recv(fd, buf.b, sizeof buf.b, MSG_DONTWAIT);
  int out = got < 0 ? -errno : -EPROTO, left = got > 0 ? (int)got : 0;
  for (struct nlmsghdr *h = &buf.nh; NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
    if (h->nlmsg_type == NLMSG_ERROR) { out = 0; break; }
    if (h->nlmsg_type == RTM_NEWROUTE) {
      out = ((struct rtmsg *)NLMSG_DATA(h))->rtm_type == RTN_LOCAL;
      break;
    }
  }
  if (kept < 0) close(fd);
  return out;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 100000;
  struct in_addr own, other;
  struct in6_addr own6;
  inet_pton(AF_INET, "127.0.0.1", &own);
  inet_pton(AF_INET, "192.0.2.77", &other);   /* TEST-NET-1: routed away (or unreachable) */
  inet_pton(AF_INET6, "::1", &own6);
  struct ifaddrs *first;
  if (getifaddrs(&first) == 0) {   /* an interface's own IPv4 address, if any but loopback */
    for (struct ifaddrs *i = first; i; i = i->ifa_next)
      if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
          ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr != own.s_addr) {
        own = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
        break;
      }
    freeifaddrs(first);
  }
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0 || route_local(fd, AF_INET, &own) != 1 || route_local(fd, AF_INET, &other) == 1 ||
      route_local(fd, AF_INET6, &own6) != 1 || route_local(-1, AF_INET, &own) != 1) {
    fprintf(stderr, "route_local: the kernel's answers are not as expected\n");
    return 1;
  }
  double t0 = now();
  for (int k = 0; k < n; k++) route_local(fd, AF_INET, &own);
  double t1 = now();
  for (int k = 0; k < n; k++) route_local(fd, AF_INET, &other);
  double t2 = now();
  for (int k = 0; k < n; k++) route_local(fd, AF_INET6, &own6);
  double t3 = now();
  for (int k = 0; k < n; k++) route_local(-1, AF_INET, &own);
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
  close(fd);
  return 0;
}
