package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.math.BigInteger;

/**
 * Fencing tokens: unsigned 64-bit integers, held in a {@code long}.
 *
 * <p>The server's counter is 64 bits wide and unsigned, so a token past 2^63 - 1 (which a
 * server started with {@code --min-token} may issue) is a negative {@code long} here: compare
 * tokens with {@link #compare} ({@link Long#compareUnsigned}) and print them with
 * {@link #toString(long)}, never with {@code <} or {@link Long#toString}. 0 is never issued.
 */
public final class Tokens {
    private static final BigInteger MAX = BigInteger.ONE.shiftLeft(64).subtract(BigInteger.ONE);

    private Tokens() {
    }

    /** Compares two tokens as unsigned numbers: negative, zero or positive as a is older, equal, newer. */
    public static int compare(long a, long b) {
        return Long.compareUnsigned(a, b);
    }

    /** The token's decimal digits (as the server, the CLI's $LEASEGATE_TOKEN and headers write it). */
    public static String toString(long token) {
        return Long.toUnsignedString(token);
    }

    /**
     * A token from its decimal digits, as a header or {@code $LEASEGATE_TOKEN} carries it.
     *
     * @throws IllegalArgumentException unless it is 1 to 20 ASCII digits of a value in 1..2^64-1
     */
    public static long parse(String digits) {
        if (digits == null || digits.isEmpty() || digits.length() > 20 || !digits.chars().allMatch(c -> c >= '0' && c <= '9')) {
            throw new IllegalArgumentException("not a fencing token (decimal digits of 1..2^64-1): " + quoted(digits));
        }
        long token;
        try {
            token = Long.parseUnsignedLong(digits);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("not a fencing token (decimal digits of 1..2^64-1): " + quoted(digits), e);
        }
        if (token == 0) {
            throw new IllegalArgumentException("not a fencing token: 0 is never issued");
        }
        return token;
    }

    /** A token as a JSON number (an unsigned value past 2^63 - 1 too). */
    static BigInteger toJson(long token) {
        return new BigInteger(Long.toUnsignedString(token));
    }

    /**
     * A token field of an answer.
     *
     * @throws LeasegateException for a field that is missing or not an integer in 0..2^64-1
     */
    static long fromJson(JsonNode node, String field) {
        JsonNode value = node.get(field);
        if (value == null || !value.isIntegralNumber() || value.bigIntegerValue().signum() < 0
                || value.bigIntegerValue().compareTo(MAX) > 0) {
            throw new LeasegateException("the server's answer has no valid '" + field + "': " + value, 0, null, null);
        }
        return value.bigIntegerValue().longValue();
    }

    private static String quoted(String s) {
        return s == null ? "null" : "'" + (s.length() > 40 ? s.substring(0, 40) + "..." : s) + "'";
    }
}
