/* coordinator/server/hosts.h — open HTTP connections per client address, and the accept
 * policy of --max-connections-per-host.
 *
 * Owns: a table of client addresses (IPv4 mapped into IPv6, loopback included) with their
 * open connection counts, kept by libmicrohttpd's connection notifications, and the accept
 * policy that refuses a connection whose address already holds the limit, so one host that
 * opens and holds connections (slow, idle or dripping clients) cannot take every slot. Does
 * not own: the server (coordinator/server/server.c).
 */
#ifndef DF_COORD_SERVER_HOSTS_H
#define DF_COORD_SERVER_HOSTS_H

#include <microhttpd.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct df_srv_hosts df_srv_hosts;

/* A table for at most `cap` distinct open addresses, each allowed `limit` connections
 * (0 = no limit). NULL when out of memory. */
df_srv_hosts *df_srv_hosts_new(int limit, unsigned cap);
void df_srv_hosts_free(df_srv_hosts **h); /* NULL-safe; sets *h NULL */

/* Connections refused so far because their address held the limit. */
int64_t df_srv_hosts_refusals(df_srv_hosts *h);

/* libmicrohttpd callbacks, cls = the table: the accept policy (MHD_NO past the limit) and
 * MHD_OPTION_NOTIFY_CONNECTION (counts a connection in at STARTED, out at CLOSED). */
enum MHD_Result df_srv_hosts_on_accept(void *cls, const struct sockaddr *addr, socklen_t len);
void df_srv_hosts_on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                                enum MHD_ConnectionNotificationCode toe);

#endif
