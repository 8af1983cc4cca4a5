/*
 * selfmetrics — the metrics about this process that every Prometheus exporter
 * has: leasegate_build_info and the standard process_* family, read from
 * /proc/self (and the boot time from /proc/stat), in the text format.
 *
 * A source that cannot be read (a /proc that hides it) leaves its metric out
 * rather than writing a made-up value.
 */
#ifndef LEASEGATE_SELFMETRICS_H
#define LEASEGATE_SELFMETRICS_H

#include <stdio.h>

void selfmetrics_write(FILE *f);

#endif
