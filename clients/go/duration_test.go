package leasegate_test

import (
	"errors"
	"testing"
	"time"

	"leasegate"
)

func TestParseDuration(t *testing.T) {
	good := map[string]time.Duration{
		"250ms": 250 * time.Millisecond, "15s": 15 * time.Second, "1.5s": 1500 * time.Millisecond,
		"2m": 2 * time.Minute, "1h": time.Hour, "0ms": 0, "1.25m": 75 * time.Second, "0.001s": time.Millisecond,
	}
	for text, want := range good {
		got, err := leasegate.ParseDuration(text)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", text, got, err, want)
		}
	}
	for _, text := range []string{"15", "1.5", "-1s", "+1s", "1 s", " 15s", "15s ", "1e3ms", "", "s", "15S", "1d",
		"1.s", ".5s", "1h30m", "0x10s", "\u0661\u0665s", "1.5ms", "0.0001s", "9007199254740992ms", "9999999999999999h"} {
		if d, err := leasegate.ParseDuration(text); !errors.Is(err, leasegate.ErrBadDuration) {
			t.Errorf("ParseDuration(%q) = %v, %v; want ErrBadDuration", text, d, err)
		}
	}
}
