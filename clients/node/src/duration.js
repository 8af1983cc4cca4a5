"use strict";
// Durations as people write them: "250ms", "15s", "2m", "1h", "1.5s".
//
// The grammar is the leasegate CLI's and the Python client's, so one spelling means the
// same everywhere: digits, an optional fraction, and a unit (ms, s, m, h), nothing else
// (no sign, no space, no exponent). The result is a whole number of milliseconds, at
// most Number.MAX_SAFE_INTEGER: "1.5s" is 1500, "1.5ms" is refused.
//
// A bare number is refused (TypeError): 15 would be seconds to one reader and
// milliseconds to another, and it was both once. The HTTP API's own *_ms fields are
// the place for numbers of milliseconds.

const UNIT_MS = { ms: 1n, s: 1000n, m: 60_000n, h: 3_600_000n };
const DURATION = /^([0-9]+)(?:\.([0-9]+))?(ms|s|m|h)$/;
const NUMBER = /^[+-]?[0-9]+(?:\.[0-9]*)?$/;
const EXAMPLES = `such as "250ms", "15s", "2m", "1h" or "1.5s"`;

/**
 * A duration ("15s", "250ms") as a whole number of milliseconds (>= 0). Throws
 * TypeError naming `what` for anything else: a bare number (15, 1.5, 15n, "15"), a
 * malformed string, a fraction of a millisecond, more than Number.MAX_SAFE_INTEGER ms,
 * or another type.
 * @param {string} value
 * @param {string} what named in the error
 * @returns {number}
 */
function toMillis(value, what = "duration") {
  if (typeof value === "number" || typeof value === "bigint" || (typeof value === "string" && NUMBER.test(value))) {
    const text = String(value).replace(/^\+/, "");
    const shown = typeof value === "string" ? JSON.stringify(value) : text;
    throw new TypeError(`${what}: ${shown} has no unit: write "${text}ms", "${text}s", `
      + `"${text}m" or "${text}h" (leasegate reads no bare number as a duration)`);
  }
  if (typeof value !== "string") {
    throw new TypeError(`${what}: expected a duration ${EXAMPLES}, got ${value === null ? "null" : typeof value}`);
  }
  const m = DURATION.exec(value);
  if (!m) throw new TypeError(`${what}: ${JSON.stringify(value)} is not a duration ${EXAMPLES}`);
  const fraction = m[2] ?? "";
  const scaled = BigInt(m[1] + fraction) * UNIT_MS[m[3]];
  const divisor = 10n ** BigInt(fraction.length);
  if (scaled % divisor !== 0n) throw new TypeError(`${what}: "${value}" is not a whole number of milliseconds`);
  const ms = scaled / divisor;
  if (ms > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new TypeError(`${what}: "${value}" is longer than ${Number.MAX_SAFE_INTEGER} ms`);
  }
  return Number(ms);
}

module.exports = { toMillis };
