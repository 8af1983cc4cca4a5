package leasegate

import (
	"fmt"
	"math/big"
	"regexp"
	"time"
)

// The grammar every leasegate client reads durations with (the CLI's --ttl, the Python and
// Node clients' ttl="15s"): digits, an optional fraction, and a unit (ms, s, m, h), nothing
// else: no sign, space or exponent, and never a bare number, which was seconds to one client
// and milliseconds to another once.
var (
	durationRE = regexp.MustCompile(`^([0-9]+)(?:\.([0-9]+))?(ms|s|m|h)$`)
	numberRE   = regexp.MustCompile(`^[+-]?[0-9]+(?:\.[0-9]*)?$`)
	unitMillis = map[string]int64{"ms": 1, "s": 1000, "m": 60000, "h": 3600000}
)

// MaxDurationMillis is the longest duration in milliseconds any leasegate client takes (2^53-1,
// JavaScript's largest exact integer). A time.Duration holds less: about 292 years.
const MaxDurationMillis = 1<<53 - 1

// ParseDuration reads a duration as the leasegate CLI and clients write it: "250ms", "15s",
// "1.5s", "2m", "1h". It must come to a whole number of milliseconds ("1.5ms" is refused).
// A bare number ("15"), a sign, a space, an exponent or another unit is refused with an error
// that errors.Is ErrBadDuration. This is not time.ParseDuration, which takes "1h30m", "-5s" and
// "1.5µs": use it for configuration that other leasegate tools read too.
func ParseDuration(text string) (time.Duration, error) {
	m := durationRE.FindStringSubmatch(text)
	if m == nil {
		if numberRE.MatchString(text) {
			return 0, fmt.Errorf("%w: %q has no unit: write %sms, %ss, %sm or %sh (leasegate reads no bare number as a duration)",
				ErrBadDuration, text, text, text, text, text)
		}
		return 0, fmt.Errorf("%w: %q is not a duration such as 250ms, 15s, 2m, 1h or 1.5s", ErrBadDuration, text)
	}
	scaled, _ := new(big.Int).SetString(m[1]+m[2], 10)
	scaled.Mul(scaled, big.NewInt(unitMillis[m[3]]))
	divisor := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(m[2]))), nil)
	ms, rest := new(big.Int).QuoRem(scaled, divisor, new(big.Int))
	if rest.Sign() != 0 {
		return 0, fmt.Errorf("%w: %q is not a whole number of milliseconds", ErrBadDuration, text)
	}
	if ms.Cmp(big.NewInt(MaxDurationMillis)) > 0 || ms.Cmp(big.NewInt(int64(maxDuration/time.Millisecond))) > 0 {
		return 0, fmt.Errorf("%w: %q is longer than a time.Duration holds", ErrBadDuration, text)
	}
	return time.Duration(ms.Int64()) * time.Millisecond, nil
}

const maxDuration = time.Duration(1<<63 - 1)

// millis is d in whole milliseconds for the wire, or an error naming what for a negative
// duration or one with a fraction of a millisecond.
func millis(what string, d time.Duration) (int64, error) {
	if d < 0 || d%time.Millisecond != 0 {
		return 0, fmt.Errorf("%w: %s: %v is not a whole number of milliseconds >= 0", ErrBadDuration, what, d)
	}
	return int64(d / time.Millisecond), nil
}
