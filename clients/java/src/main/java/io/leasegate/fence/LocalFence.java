package io.leasegate.fence;

import io.leasegate.client.Tokens;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Fence marks kept in this process: the highest token accepted per resource, in memory. Right for
 * a backend that is one process and trusts its callers to send tokens leasegate issued; the marks
 * start again from nothing when the process restarts, so a write with a token older than the last
 * one before the restart is accepted once. A backend that must survive restarts, or has several
 * replicas, uses {@link ServerFence}. One mark per resource ever checked (a few dozen bytes each).
 */
public final class LocalFence implements FenceCheck {
    private final ConcurrentHashMap<String, Long> marks = new ConcurrentHashMap<>();

    @Override
    public FenceDecision check(String resource, long token) {
        long[] max = new long[1];
        marks.compute(resource, (key, mark) -> {
            long now = mark == null || Tokens.compare(token, mark) >= 0 ? token : mark;
            max[0] = now;
            return now;
        });
        return new FenceDecision(resource, max[0] == token, token, max[0]);
    }

    /** The highest token accepted for the resource, or 0 when none was. */
    public long mark(String resource) {
        return marks.getOrDefault(resource, 0L);
    }
}
