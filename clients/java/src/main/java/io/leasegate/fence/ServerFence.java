package io.leasegate.fence;

import io.leasegate.client.FenceResult;
import io.leasegate.client.LeasegateClient;
import io.leasegate.client.StaleTokenException;

/**
 * Fence marks kept by leasegate: each check is a {@code POST /v1/fence/{resource}}, so the marks are
 * durable (committed before the answer), shared by every replica of the backend, and refuse a token
 * that was never issued. Retries and failover are the client's. The resource must be a valid
 * leasegate name ({@code [A-Za-z0-9._~:/-]{1,256}}).
 */
public final class ServerFence implements FenceCheck {
    private final LeasegateClient client;

    public ServerFence(LeasegateClient client) {
        this.client = client;
    }

    @Override
    public FenceDecision check(String resource, long token) {
        try {
            FenceResult result = client.fence(resource, token);
            return new FenceDecision(resource, true, token, result.maxToken());
        } catch (StaleTokenException e) {
            long max = e.body().path("max_token").isIntegralNumber()
                    ? e.body().get("max_token").bigIntegerValue().longValue() : token;
            return new FenceDecision(resource, false, token, max);
        }
    }

    @Override
    public String toString() {
        return "ServerFence" + client.servers();
    }
}
