package io.leasegate.client;

import java.math.BigInteger;
import java.time.Duration;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Durations as people write them: "250ms", "15s", "2m", "1h", "1.5s".
 *
 * <p>The grammar is the CLI's and the Python and Node clients': digits, an optional fraction and a
 * unit ({@code ms}, {@code s}, {@code m}, {@code h}), nothing else (no sign, space or exponent).
 * The value must be a whole number of milliseconds, at most 2^53 - 1 ms (the same bound in every
 * client). A bare number is refused: 15 would be seconds to one reader and milliseconds to another.
 * In Java code, pass a {@link Duration}; this class is for durations read from configuration.
 */
public final class Durations {
    /** The largest duration any leasegate client sends, in milliseconds: 2^53 - 1. */
    public static final long MAX_MS = (1L << 53) - 1;

    private static final Pattern DURATION = Pattern.compile("([0-9]+)(?:\\.([0-9]+))?(ms|s|m|h)");
    private static final Pattern NUMBER = Pattern.compile("[+-]?[0-9]+(?:\\.[0-9]*)?");
    private static final String EXAMPLES = "such as '250ms', '15s', '2m', '1h' or '1.5s'";

    private Durations() {
    }

    /**
     * Parses a duration in the grammar above.
     *
     * @param text the duration
     * @param what the argument's name, for the error message
     * @throws IllegalArgumentException naming {@code what}, for a bare number, a malformed string,
     *     a fraction of a millisecond or a duration beyond {@link #MAX_MS}
     */
    public static Duration parse(String text, String what) {
        if (text == null) {
            throw new IllegalArgumentException(what + ": expected a duration " + EXAMPLES + ", got null");
        }
        if (NUMBER.matcher(text).matches()) {
            throw new IllegalArgumentException(what + ": '" + text + "' has no unit: write '" + text + "ms', '"
                    + text + "s', '" + text + "m' or '" + text + "h' (leasegate reads no bare number as a duration)");
        }
        Matcher m = DURATION.matcher(text);
        if (!m.matches()) {
            throw new IllegalArgumentException(what + ": '" + text + "' is not a duration " + EXAMPLES);
        }
        String fraction = m.group(2) == null ? "" : m.group(2);
        long unitMs = switch (m.group(3)) {
            case "ms" -> 1;
            case "s" -> 1000;
            case "m" -> 60_000;
            default -> 3_600_000;
        };
        BigInteger[] qr = new BigInteger(m.group(1) + fraction).multiply(BigInteger.valueOf(unitMs))
                .divideAndRemainder(BigInteger.TEN.pow(fraction.length()));
        if (qr[1].signum() != 0) {
            throw new IllegalArgumentException(what + ": '" + text + "' is not a whole number of milliseconds");
        }
        if (qr[0].compareTo(BigInteger.valueOf(MAX_MS)) > 0) {
            throw new IllegalArgumentException(what + ": '" + text + "' is longer than " + MAX_MS + " ms");
        }
        return Duration.ofMillis(qr[0].longValueExact());
    }

    /**
     * A duration as the whole number of milliseconds the HTTP API takes.
     *
     * @throws IllegalArgumentException naming {@code what}, for a negative duration, a fraction of
     *     a millisecond, or more than {@link #MAX_MS}
     * @throws NullPointerException for null
     */
    public static long toMillis(Duration duration, String what) {
        if (duration == null) {
            throw new NullPointerException(what + ": expected a duration, got null");
        }
        if (duration.isNegative() || duration.getNano() % 1_000_000 != 0
                || duration.compareTo(Duration.ofMillis(MAX_MS)) > 0) {
            throw new IllegalArgumentException(what + ": " + duration
                    + " is not a whole number of milliseconds from 0 to " + MAX_MS);
        }
        return duration.toMillis();
    }
}
