/* etcdmetrics — the etcd series of every gateway's /metrics; see etcdmetrics.h. */
#include "api/etcdmetrics.h"

#include <stdatomic.h>

static void counter(FILE *f, const char *name, const char *help, uint64_t v)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, (unsigned long long)v);
}

static void gauge(FILE *f, const char *name, const char *help, long long v)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n%s %lld\n", name, help, name, name, v);
}

static uint64_t load(const _Atomic uint64_t *v) { return atomic_load(v); }

void etcdmetrics_write(FILE *f, Election *e, const EtcdStats *st, bool ready)
{
    char leader[512];
    ElectionRole role = election_role(e, leader, sizeof leader);
    gauge(f, "leasegate_ready", "1 when this gateway is ready to serve (what GET /readyz answers).", ready);
    gauge(f, "leasegate_leader", "1 when this gateway leads the etcd prefix.", role == ROLE_LEADER);
    fprintf(f, "# HELP leasegate_role This gateway's role (1 for the current one).\n# TYPE leasegate_role gauge\n");
    for (ElectionRole r = ROLE_CANDIDATE; r <= ROLE_LEADER; r++)
        fprintf(f, "leasegate_role{role=\"%s\"} %d\n", election_role_name(r), r == role);
    gauge(f, "leasegate_leadership_seconds", "Time since this gateway became leader (0 when it does not lead).",
          election_leading_ms(e) / 1000);
    gauge(f, "leasegate_leader_seen_seconds", "Time since this gateway last saw the leadership change.",
          election_leader_seen_ms(e) / 1000);
    gauge(f, "leasegate_etcd_lease_renewed",
          "1 while this gateway's etcd lease was renewed within its TTL (it reaches etcd).", election_renewed(e));
    counter(f, "leasegate_leases_replaced_total",
            "etcd leases that etcd ended under this gateway and that it replaced without giving up its role.",
            election_leases_replaced(e));
    if (!st)
        return;
    fprintf(f, "# HELP leasegate_etcd_errors_total Calls to etcd (attempts at one member) that failed, by kind: "
               "unreachable, timeout, tls, unavailable (no leader, too many requests), nospace (quota alarm), "
               "refused.\n# TYPE leasegate_etcd_errors_total counter\n");
    for (EtcdErrKind k = 0; k < ETCD_ERR_KINDS; k++)
        fprintf(f, "leasegate_etcd_errors_total{kind=\"%s\"} %llu\n", etcd_err_kind_name(k),
                (unsigned long long)load(&st->errors[k]));
    counter(f, "leasegate_etcd_retries_total",
            "Attempts of etcd calls after their first (at the next member, or in a new round).", load(&st->retries));
    counter(f, "leasegate_etcd_keepalive_failures_total",
            "Keepalives of this gateway's etcd lease that renewed nothing (no answer, or TTL 0).",
            load(&st->keepalive_failures));
    counter(f, "leasegate_etcd_elections_won_total",
            "Elections this gateway won (campaigns, and re-leads under a new lease).", load(&st->elections_won));
    counter(f, "leasegate_etcd_leader_changes_total",
            "Times this gateway, not leading, saw the leader change (or go).", load(&st->leader_changes));
    counter(f, "leasegate_etcd_compactions_total", "Compactions of the lock space's etcd history made by this gateway.",
            load(&st->compactions));
    gauge(f, "leasegate_etcd_alarm", "1 while etcd raises an alarm that refuses writes (NOSPACE), else 0.",
          (long long)load(&st->alarm));
}
