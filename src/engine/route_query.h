/*
 * route_query: whether the kernel delivers an address to this host, asked by netlink (see
 * route_query.c). Depends on the C library alone, so that bench/route_local.c times the very
 * query the engine makes. Must never: hold state of its own (the caller keeps the socket).
 */
#ifndef MEND_ROUTE_QUERY_H
#define MEND_ROUTE_QUERY_H

#include <stdint.h>

/* Whether the kernel delivers a TCP connection to a (16 bytes: an IPv4 address as its
 * IPv4-mapped IPv6 form) port port_be (network order) to this host: 1 it does (the route is
 * RTN_LOCAL), 0 it does not (another route, or none: the connect would fail), -errno the
 * query failed. *kept is the netlink socket kept for the next query, plus 1 (0: none; one is
 * opened, and closed and 0 again after a failure); *seq the last query's sequence number. */
int mend__route_local(int *kept, unsigned *seq, const unsigned char a[16], uint16_t port_be);

#endif
