/* threads — the thread model's owners; see threads.h. */
#include "core/threads.h"

void thread_own(ThreadOwner *o)
{
    o->thread = pthread_self();
    o->set = true;
}

bool thread_owns(const ThreadOwner *o) { return !o->set || pthread_equal(o->thread, pthread_self()); }
