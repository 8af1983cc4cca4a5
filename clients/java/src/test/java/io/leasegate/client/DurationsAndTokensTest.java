package io.leasegate.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import org.junit.jupiter.api.Test;

/** The duration grammar every client shares, and tokens as unsigned 64-bit values (no server). */
class DurationsAndTokensTest {
    @Test
    void durationsAsPeopleWriteThem() {
        assertEquals(Duration.ofMillis(250), Durations.parse("250ms", "ttl"));
        assertEquals(Duration.ofMillis(1500), Durations.parse("1.5s", "ttl"));
        assertEquals(Duration.ofMinutes(2), Durations.parse("2m", "ttl"));
        assertEquals(Duration.ofHours(1), Durations.parse("1h", "ttl"));
        assertEquals(Duration.ofMillis(1), Durations.parse("0.001s", "ttl"));
        assertEquals(Duration.ZERO, Durations.parse("0s", "wait"));
    }

    @Test
    void aBareNumberOrAnythingElseIsRefusedNamingTheArgument() {
        IllegalArgumentException bare = assertThrows(IllegalArgumentException.class, () -> Durations.parse("15", "ttl"));
        assertTrue(bare.getMessage().startsWith("ttl: '15' has no unit"), bare.getMessage());
        for (String bad : new String[] {"1.5ms", "-1s", "+1s", " 1s", "1s ", "1e3ms", "1 s", "1S", "s", "1.s", "", "1d"}) {
            assertThrows(IllegalArgumentException.class, () -> Durations.parse(bad, "wait"), bad);
        }
        assertThrows(IllegalArgumentException.class, () -> Durations.parse("9007199254740992ms", "ttl"), "past 2^53 - 1");
        assertEquals(Duration.ofMillis(Durations.MAX_MS), Durations.parse("9007199254740991ms", "ttl"));
        assertThrows(IllegalArgumentException.class, () -> Durations.parse(null, "ttl"));
        assertThrows(IllegalArgumentException.class, () -> Durations.toMillis(Duration.ofNanos(1), "ttl"));
        assertThrows(IllegalArgumentException.class, () -> Durations.toMillis(Duration.ofMillis(-1), "ttl"));
    }

    @Test
    void tokensAreUnsigned() {
        long big = Tokens.parse("18446744073709551615");
        assertEquals(-1L, big);
        assertEquals("18446744073709551615", Tokens.toString(big));
        assertTrue(Tokens.compare(big, Long.MAX_VALUE) > 0);
        assertTrue(Tokens.compare(Tokens.parse("9223372036854775808"), Tokens.parse("9223372036854775807")) > 0);
        for (String bad : new String[] {"0", "-1", "18446744073709551616", "1a", "", " 1", "+1", "123456789012345678901"}) {
            assertThrows(IllegalArgumentException.class, () -> Tokens.parse(bad), bad);
        }
    }
}
