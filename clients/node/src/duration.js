// Durations as people write them: "250ms", "15s", "2m", "1h", or a number of
// milliseconds (the unit of setTimeout and Date). The strings are those of the
// leasegate CLI, so one spelling works in both places.

const UNITS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
const DURATION = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*$/;

/**
 * A duration in milliseconds (>= 0). A string needs a unit, so that "15" cannot be
 * read as seconds by one reader and milliseconds by another.
 * @param {string|number} value
 * @param {string} what named in the error
 */
export function toMillis(value, what = "duration") {
  let ms;
  if (typeof value === "number") {
    ms = value;
  } else if (typeof value === "string") {
    const m = DURATION.exec(value);
    if (!m) throw new RangeError(`${what}: '${value}' is not a duration such as '250ms', '15s', '2m' or '1h'`);
    ms = Number(m[1]) * UNITS[m[2]];
  } else {
    throw new TypeError(`${what}: expected a duration ('15s') or a number of milliseconds, got ${typeof value}`);
  }
  if (!(ms >= 0) || !Number.isFinite(ms)) throw new RangeError(`${what}: must be a finite duration >= 0, got ${value}`);
  return ms;
}
