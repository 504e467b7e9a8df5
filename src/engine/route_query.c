/*
 * route_query: whether the kernel delivers an address to this host, the kernel's own answer at
 * the moment of asking (http_addr.c asks it for each connection of an engine with an
 * allow-list): a netlink RTM_GETROUTE for the address, TCP and the port (what
 * `ip route get ADDR ipproto tcp dport N` asks, as the connect's own lookup does) answers a
 * route of type RTN_LOCAL for every address this host delivers to itself: its interfaces'
 * addresses, one taken a moment ago, and those of a local route (AnyIP), which no list of
 * interface addresses holds. The reply is made as the request is sent (rtnetlink answers in
 * the sender's call), so the read never waits: nothing there is a failure, never a wait on the
 * caller's loop. A reply left from a query that failed is read past by its sequence number.
 * Built from the C library alone (bench/route_local.c times it as it is).
 * Must never: change a route or an address; wait for the kernel.
 */
#include "route_query.h"

#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* An attribute at *off in attr (a request's attributes), *off moved past it. */
static void put_attr(unsigned char *attr, size_t *off, unsigned short type, const void *v,
                     size_t n) {
  struct rtattr at = {.rta_len = (unsigned short)RTA_LENGTH(n), .rta_type = type};
  memcpy(attr + *off, &at, sizeof at);
  memcpy(attr + *off + RTA_LENGTH(0), v, n);
  *off += RTA_SPACE(n);
}

/* The query asks what the connect's own lookup asks: the destination, TCP, the port (policy
 * rules may select on protocol and port, `ip rule ... ipproto tcp dport 80`), as the caller's
 * user (the kernel's default for a query). */
int mend__route_local(int *kept, unsigned *seq, const unsigned char a[16], uint16_t port_be) {
  static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  int v4 = memcmp(a, mapped, 12) == 0;
  size_t alen = v4 ? 4 : 16;
  struct {
    struct nlmsghdr nh;
    struct rtmsg rt;
    unsigned char attr[RTA_SPACE(16) + RTA_SPACE(1) + RTA_SPACE(2)];
  } req;
  memset(&req, 0, sizeof req);
  req.nh.nlmsg_type = RTM_GETROUTE;
  req.nh.nlmsg_flags = NLM_F_REQUEST;
  req.nh.nlmsg_seq = ++*seq;
  req.rt.rtm_family = v4 ? AF_INET : AF_INET6;
  req.rt.rtm_dst_len = (unsigned char)(alen * 8);
  unsigned char tcp = IPPROTO_TCP;
  size_t off = 0;
  put_attr(req.attr, &off, RTA_DST, v4 ? a + 12 : a, alen);
  put_attr(req.attr, &off, RTA_IP_PROTO, &tcp, 1);
  put_attr(req.attr, &off, RTA_DPORT, &port_be, 2);
  req.nh.nlmsg_len = (unsigned)(NLMSG_LENGTH(sizeof req.rt) + off);

  if (*kept <= 0) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0) return errno ? -errno : -EIO;
    *kept = fd + 1;
  }
  int fd = *kept - 1;
  struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
  int out = -EPROTO;
  if (sendto(fd, &req, req.nh.nlmsg_len, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0) {
    out = errno ? -errno : -EIO;
    goto failed;
  }
  /* a route's reply is some hundred bytes; aligned for the headers read in place */
  union { struct nlmsghdr nh; unsigned char b[8192]; } buf;
  for (int reads = 0; reads < 8; reads++) {
    struct sockaddr_nl from;
    socklen_t fromlen = sizeof from;
    ssize_t got = recvfrom(fd, buf.b, sizeof buf.b, MSG_DONTWAIT, (struct sockaddr *)&from,
                           &fromlen);
    if (got < 0) {
      out = errno ? -errno : -EIO;
      goto failed;
    }
    if (from.nl_pid != 0) continue;   /* not the kernel's */
    int left = (int)got;
    for (struct nlmsghdr *h = &buf.nh; NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_seq != req.nh.nlmsg_seq) continue;
      if (h->nlmsg_type == NLMSG_ERROR &&
          h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct nlmsgerr))) {
        int e = -((struct nlmsgerr *)NLMSG_DATA(h))->error;
        /* no route, an unreachable or a prohibit one: nothing here answers there */
        if (e == ENETUNREACH || e == EHOSTUNREACH || e == EACCES) return 0;
        /* any other answer (a blackhole route's EINVAL among them) leaves the address unknown,
         * refused; the socket answered and is kept */
        return e > 0 ? -e : -EPROTO;
      }
      if (h->nlmsg_type == RTM_NEWROUTE && h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct rtmsg)))
        return ((struct rtmsg *)NLMSG_DATA(h))->rtm_type == RTN_LOCAL;
    }
  }
failed:
  close(fd);
  *kept = 0;
  return out;
}
