/*
 * dispatch — the layers above HTTP, as the HTTP layer sees them (http.h's
 * HttpApp): a request under a guard prefix goes to the guard, any other to
 * the endpoint router; the lock rules at a request's edges are the API's.
 */
#ifndef LEASEGATE_DISPATCH_H
#define LEASEGATE_DISPATCH_H

#include "net/http.h"

const HttpApp *dispatch_app(void);

#endif
