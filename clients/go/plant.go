//go:build !leasegate_plant_late_loss

package leasegate

import "time"

// plantedLossDelay is 0: a lease's bound is what the Lease documentation says. The conformance
// runner's test of itself builds the client with the tag leasegate_plant_late_loss instead
// (plant_late_loss.go), which signals every loss one TTL late and must fail TOKEN-4.
func plantedLossDelay(time.Duration) time.Duration { return 0 }
