package io.leasegate.client;

/**
 * What a lease is a grant of: a lock, permits of a semaphore, or the leadership of an election.
 * Each is a namespace of names of its own, with its own paths: an election's acquire is its
 * campaign, its release the leader's resignation.
 */
enum Kind {
    LOCK("locks"), SEMAPHORE("semaphores"), ELECTION("elections");

    private final String collection;

    Kind(String collection) {
        this.collection = collection;
    }

    /** The path of an action (acquire, renew, release, value, proclaim, or "" for the state) on {@code name}. */
    String path(String name, String action) {
        if (this == ELECTION) {
            action = "acquire".equals(action) ? "campaign" : "release".equals(action) ? "resign" : action;
        }
        return "/v1/" + collection + "/" + Transport.quote(name) + (action.isEmpty() ? "" : "/" + action);
    }
}
