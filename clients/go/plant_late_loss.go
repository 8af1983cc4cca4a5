//go:build leasegate_plant_late_loss

package leasegate

import "time"

// A planted bug, only in a build with the tag leasegate_plant_late_loss (tests/conformance/
// run.py --plant late-loss): the lease is trusted one TTL longer than the server keeps it, so
// its loss is signalled after the next holder may have been granted. The conformance runner
// must fail this client with TOKEN-4.
func plantedLossDelay(ttl time.Duration) time.Duration { return ttl }
