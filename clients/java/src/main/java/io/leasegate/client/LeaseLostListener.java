package io.leasegate.client;

/**
 * Told once when a lease is lost (Redisson's and Hazelcast's listeners have the same role): at the
 * latest when the lease's time runs out on the client's clock, which is before the server can grant
 * the lock to anyone else (see {@link Lease#isValid()}). It runs on the client's callback executor,
 * never on the thread that renews, so a slow listener delays no renewal.
 */
@FunctionalInterface
public interface LeaseLostListener {
    void leaseLost(LeaseLostException loss);
}
