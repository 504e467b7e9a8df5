/*
 * http_addr: which addresses the requests of an engine with an allow-list (or a sandbox) may
 * connect to. The allow-list names hosts, but a name it allows (by a wildcard, or any name
 * whose DNS the workflow's author controls) may resolve to an address of the engine's own
 * machine or link: loopback, unspecified (0.0.0.0 and :: reach the local host), link-local
 * (169.254.169.254 and fd00:ec2::254 are cloud metadata services), or an IPv4-mapped IPv6 form
 * of these. Such an address is refused unless the allow-list names it as an address, or names
 * `localhost` (which allows loopback). So is an address this machine delivers to itself (an
 * interface's, eth0's 10.0.0.5 or fd00::2, or a local route's): a listener of the host's bound
 * to 0.0.0.0 or :: answers there as on loopback; `localhost` allows these too. The check is made on
 * the address curl is about to connect to (its open-socket callback, http.c), never by a resolve
 * of its own: a name that answers one address to a check and another to the connect gains
 * nothing. Private ranges (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7) but this
 * machine's own addresses are allowed: they are other machines, which is what an allow-list of
 * internal names (payments.internal) is for; the host who names such a name chose to reach
 * that network.
 * An environment proxy (http_proxy, https_proxy, all_proxy; curl's rules) is the host's
 * configuration and gets no allowance of its own: curl connects to the proxy's address, which
 * the check sees as any other. A proxy on another machine is reached; one on this machine
 * (loopback, its interfaces' addresses, link-local) must be named in http_allow by its
 * address, which allows that address's every port. Allowing a proxy's address for the proxy
 * alone would need to know which requests curl sends through it (no_proxy, the scheme,
 * httpoxy's upper-case rule).
 * Whether an address is this machine's own is the kernel's answer, asked at each connection
 * (route_query.c: a netlink RTM_GETROUTE for it, TCP and its port, answered RTN_LOCAL for every
 * address this host delivers to itself, those of a local route too, AnyIP's
 * `ip route add local 198.51.100.0/24 dev lo`, which no list of interface addresses holds).
 * On a socket kept open it costs 8-17 us a new connection (a socket of its own each time
 * 33-37, getifaddrs 73-119 a read: bench/route_local.c on this 2-core VM under load,
 * bench/README.md), beside the connection's own handshake: no list is kept, and there is no
 * window in which an address is new.
 * A query that fails (no descriptor or memory left) leaves the address unknown: the connection
 * is refused, retryable, saying why.
 * Must never: resolve a name itself (the target's or a proxy's); refuse an address the
 * allow-list names.
 */
#include "http_int.h"
#include "route_query.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* The 16 bytes of an address, an IPv4 one as its IPv4-mapped IPv6 form. 0: not IP. */
static int addr16(const struct sockaddr *sa, unsigned char out[16]) {
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
    memset(out, 0, 10);
    out[10] = out[11] = 0xff;
    memcpy(out + 12, &s4->sin_addr, 4);
    return 1;
  }
  if (sa->sa_family == AF_INET6) {
    memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    return 1;
  }
  return 0;
}

static int is_v4(const unsigned char a[16]) {
  static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(a, mapped, 12) == 0;
}

/* 1: loopback (or `localhost`'s), 2: unspecified, link-local or a metadata service; 0: other
 * (which may still be one this machine delivers to itself: mend__route_local). */
static int local_kind(const unsigned char a[16]) {
  if (is_v4(a)) {
    const unsigned char *v = a + 12;
    if (v[0] == 127) return 1;
    if (v[0] == 0) return 2;                        /* 0.0.0.0/8: "this host" */
    if (v[0] == 169 && v[1] == 254) return 2;       /* link-local, 169.254.169.254 */
    return 0;
  }
  static const unsigned char zero[15] = {0};
  if (memcmp(a, zero, 15) == 0) return a[15] == 1 ? 1 : a[15] == 0 ? 2 : 0;   /* ::1, :: */
  if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80) return 2;                          /* fe80::/10 */
  static const unsigned char ec2[16] = {0xfd, 0, 0x0e, 0xc2, 0, 0, 0, 0,
                                        0, 0, 0, 0, 0, 0, 0x02, 0x54};   /* fd00:ec2::254 */
  if (memcmp(a, ec2, 16) == 0) return 2;
  return 0;
}

/* Appends a to the list *v of *n addresses (grown by 8). -1: out of memory. */
static int add_addr(unsigned char (**v)[16], int *n, const unsigned char a[16]) {
  if (*n % 8 == 0) {
    unsigned char(*t)[16] = realloc(*v, (size_t)(*n + 8) * sizeof *t);
    if (!t) return -1;
    *v = t;
  }
  memcpy((*v)[(*n)++], a, 16);
  return 0;
}

static int in_list(unsigned char (*v)[16], int n, const unsigned char a[16]) {
  for (int k = 0; k < n; k++)
    if (memcmp(v[k], a, 16) == 0) return 1;
  return 0;
}

void mend__http_addr_free(struct mend_http *H) {
  if (H->route_fd > 0) close(H->route_fd - 1);
  H->route_fd = 0;
  free(H->named);
  H->named = NULL;
}

/* An allow-list entry that is an address ("127.0.0.1", "::1", "[::1]"): named. */
static void entry_address(struct mend_http *H, const char *p, size_t n) {
  char buf[64];
  if (n && p[0] == '[' && p[n - 1] == ']') p++, n -= 2;
  if (n == 0 || n >= sizeof buf) return;
  memcpy(buf, p, n);
  buf[n] = '\0';
  if (strcasecmp(buf, "localhost") == 0) { H->allow_loopback = 1; return; }
  unsigned char a[16] = {0};
  if (inet_pton(AF_INET, buf, a + 12) == 1) a[10] = a[11] = 0xff;
  else if (inet_pton(AF_INET6, buf, a) != 1) return;
  add_addr(&H->named, &H->nnamed, a);
}

void mend__http_addr_init(struct mend_http *H) {
  const mend_engine *E = H->E;
  H->addr_check = E->cfg.sandbox || E->cfg.http_allow;
  if (!H->addr_check) return;
  const char *list = E->cfg.http_allow ? E->cfg.http_allow : "", *p;
  size_t n;
  while (mend__http_allow_next(&list, &p, &n)) entry_address(H, p, n);
}

int mend__http_addr_refused(struct mend_http *H, const struct sockaddr *sa, char *shown,
                            size_t cap) {
  unsigned char a[16];
  if (!H->addr_check || !addr16(sa, a)) return 0;
  int kind = local_kind(a);
  H->route_err = 0;
  if (in_list(H->named, H->nnamed, a)) return 0;
  /* `localhost` allows every address of this machine but link-local: nothing to ask */
  if (kind == 0 && H->allow_loopback) return 0;
  if (kind == 0) {
    uint16_t port = sa->sa_family == AF_INET ? ((const struct sockaddr_in *)sa)->sin_port
                                             : ((const struct sockaddr_in6 *)sa)->sin6_port;
    int local = mend__route_local(&H->route_fd, &H->route_seq, a, port);
    if (local < 0) H->route_err = -local, kind = 3;           /* may be this machine's */
    else if (local) kind = 1;                                 /* this machine's, as loopback */
  }
  if (kind == 0 || (kind != 2 && H->allow_loopback)) return 0;
  if (is_v4(a) && sa->sa_family == AF_INET6) {
    char v4[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, a + 12, v4, sizeof v4);
    snprintf(shown, cap, "::ffff:%s", v4);
  } else if (!inet_ntop(is_v4(a) ? AF_INET : AF_INET6, is_v4(a) ? (const void *)(a + 12)
                                                                 : (const void *)a,
                        shown, (socklen_t)cap)) {
    snprintf(shown, cap, "?");
  }
  return kind == 3 ? 2 : 1;
}
