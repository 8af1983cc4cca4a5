package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * One change of an election, or its state when observing began ({@link ElectionObserver}).
 *
 * @param type {@link #LEADER}: a new leader, or the leader proclaimed a new value (owner, term,
 *     value); {@link #VACANT}: nobody leads (reason, previousTerm), sent whenever a term ends, also
 *     when the next candidate leads at once (its leader event follows)
 * @param id the server's id of the event: {@link LeasegateClient#observe(String, Long)} with it
 *     resumes after it
 * @param owner the leader's owner label (null for a vacancy)
 * @param term the leader's term (0 for a vacancy)
 * @param value the leader's value, as sent (null for a vacancy)
 * @param reason why the term ended: "resigned", "expired" or "revoked"; null when not known (the
 *     state of an election whose end the server has not seen, as after its restart) and for a leader
 * @param previousTerm the term that ended (0 when not known, and for a leader)
 * @param gap the server no longer had the events after the last one returned (or after the id to
 *     resume after): its ring dropped them, it restarted, or another gateway leads the lock space
 *     now. This is the election's state when the stream opened again, and changes in between may
 *     be lost. A state that says what the last event said is not returned again.
 */
public record ElectionEvent(String type, long id, String owner, long term, JsonNode value, String reason,
                            long previousTerm, boolean gap) {
    public static final String LEADER = "leader";
    public static final String VACANT = "vacant";

    /** True for a leader event. */
    public boolean isLeader() {
        return LEADER.equals(type);
    }

    ElectionEvent withGap() {
        return new ElectionEvent(type, id, owner, term, value, reason, previousTerm, true);
    }

    ElectionEvent withId(long newId) {
        return new ElectionEvent(type, newId, owner, term, value, reason, previousTerm, gap);
    }
}
