/*
 * etcdmetrics — what every gateway on etcd says in /metrics about its role and
 * its traffic with etcd, leader or not: the leader's /metrics (api_admin.c)
 * and a standby's (standby.c) write the same series, so that one dashboard
 * reads every gateway alike. In the text format.
 */
#ifndef LEASEGATE_ETCDMETRICS_H
#define LEASEGATE_ETCDMETRICS_H

#include <stdbool.h>
#include <stdio.h>

#include "store/election.h"
#include "store/etcd.h"

/* ready: what /readyz answers now (1 ready, 0 not). st may be NULL (nothing counted). */
void etcdmetrics_write(FILE *f, Election *e, const EtcdStats *st, bool ready);

#endif
