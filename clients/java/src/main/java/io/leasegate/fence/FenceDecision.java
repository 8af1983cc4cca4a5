package io.leasegate.fence;

import io.leasegate.client.Tokens;

/**
 * What a fence check decided for one write: accepted when its token is at least the highest seen
 * for the resource (which it then becomes), refused as stale otherwise.
 *
 * @param resource the resource checked
 * @param accepted whether the write may go ahead
 * @param token the token checked
 * @param maxToken the resource's highest token now
 */
public record FenceDecision(String resource, boolean accepted, long token, long maxToken) {
    @Override
    public String toString() {
        return "FenceDecision[" + resource + (accepted ? " accepted" : " stale") + " token=" + Tokens.toString(token)
                + " max_token=" + Tokens.toString(maxToken) + "]";
    }
}
