/*
 * Unit test of the thread model's owners (core/threads.h): a structure is
 * owned by the thread that took it, and by no other until one takes it over;
 * and, in a debug build, a call into the lock table from a thread that does
 * not own it stops the process (the assertion, SQLite's style).
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "core/locktab.h"
#include "core/threads.h"

static void *owns_there(void *arg) { return (void *)(intptr_t)thread_owns(arg); }

static void *take_there(void *arg)
{
    thread_own(arg);
    return NULL;
}

#ifndef NDEBUG
static void *tick_there(void *arg)
{
    Now now = {1000, 1700000000000};
    locktab_tick(arg, &now);
    return NULL;
}
#endif

static bool owned_elsewhere(ThreadOwner *o)
{
    pthread_t t;
    void *r = NULL;
    CHECK(pthread_create(&t, NULL, owns_there, o) == 0 && pthread_join(t, &r) == 0);
    return r != NULL;
}

int main(void)
{
    ThreadOwner o = {0};
    CHECK(thread_owns(&o) && owned_elsewhere(&o)); /* nobody's yet */
    thread_own(&o);
    CHECK(thread_owns(&o) && !owned_elsewhere(&o));
    /* Handed over: the other thread takes it, and this one no longer owns it. */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, take_there, &o) == 0 && pthread_join(t, NULL) == 0);
    CHECK(!thread_owns(&o));
#ifndef NDEBUG
    pid_t child = fork();
    if (child == 0) {
        LocktabLimits limits = {10, 10, 10, 10, 1000};
        LocktabHooks hooks = {0};
        Locktab *lt = locktab_new(&limits, &hooks);
        if (!lt || pthread_create(&t, NULL, tick_there, lt) != 0)
            _exit(2);
        pthread_join(t, NULL);
        _exit(0); /* the assertion did not stop it */
    }
    int status = 0;
    CHECK(child > 0 && waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
#endif
    return check_report("threads");
}
