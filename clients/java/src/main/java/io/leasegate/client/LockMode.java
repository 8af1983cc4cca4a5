package io.leasegate.client;

/** The mode of a lock's lease: one writer alone, or readers together. */
public enum LockMode {
    /** Exclusive: one holder at a time (the default). */
    WRITE,
    /** Shared with other readers; a writer waits for every reader. The guard refuses a read lease's writes. */
    READ;

    /** The mode's name on the wire: "write" or "read". */
    public String wire() {
        return this == WRITE ? "write" : "read";
    }
}
