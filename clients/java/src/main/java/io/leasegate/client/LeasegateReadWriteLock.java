package io.leasegate.client;

import java.util.concurrent.locks.ReadWriteLock;

/**
 * A read-write lock on one name (Redisson's {@code RReadWriteLock}): the read lock is shared by
 * any number of readers, the write lock held by one writer alone, each hold a lease of its own
 * with its own token. The server's queue is first come first served for both: a reader arriving
 * behind a waiting writer waits too, so neither side starves. The guard refuses a read lease's
 * writes. There is no upgrade or downgrade: a thread holding one of the two that asks for the
 * other gets IllegalStateException (it would wait for itself).
 */
public final class LeasegateReadWriteLock implements ReadWriteLock {
    private final LeasegateLock readLock;
    private final LeasegateLock writeLock;

    LeasegateReadWriteLock(LeasegateClient client, String name, AcquireOptions options) {
        this.readLock = new LeasegateLock(client, name, options.mode(LockMode.READ), this);
        this.writeLock = new LeasegateLock(client, name, options.mode(LockMode.WRITE), this);
    }

    @Override
    public LeasegateLock readLock() {
        return readLock;
    }

    @Override
    public LeasegateLock writeLock() {
        return writeLock;
    }

    LeasegateLock other(LeasegateLock lock) {
        return lock == readLock ? writeLock : readLock;
    }
}
