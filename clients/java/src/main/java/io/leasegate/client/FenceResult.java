package io.leasegate.client;

/**
 * The answer of an accepted fence check: the resource, and its high-water mark now (the token
 * checked, or a larger one already seen). A refused check is a {@link StaleTokenException}.
 */
public record FenceResult(String resource, boolean accepted, long maxToken) {
    @Override
    public String toString() {
        return "FenceResult[" + resource + " accepted=" + accepted + " max_token=" + Tokens.toString(maxToken) + "]";
    }
}
