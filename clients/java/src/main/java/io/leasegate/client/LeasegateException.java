package io.leasegate.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * Base of every error this library throws: unchecked, so that {@link java.util.concurrent.locks.Lock}'s
 * methods can throw it.
 *
 * <p>Every error answer of leasegate is {@code {"error": "<code>", "message": "...", ...}}. The
 * code, not the status, says what happened (409 alone may be {@code lock_held}, {@code not_holder}
 * or {@code stale_token}), so the class is chosen by the code ({@link #fromAnswer}) and callers can
 * {@code catch (LockHeldException e)}. A code without a class of its own is a plain
 * LeasegateException whose {@link #code()} names it.
 */
public class LeasegateException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final int status;
    private final String code;
    private final transient JsonNode body;

    /**
     * @param message the server's human text, or ours
     * @param status the HTTP status, or 0 when no server answered
     * @param code the contract's error code, or null
     * @param body the whole parsed answer (never null: an empty object when there is none)
     */
    public LeasegateException(String message, int status, String code, JsonNode body) {
        this(message, status, code, body, null);
    }

    public LeasegateException(String message, int status, String code, JsonNode body, Throwable cause) {
        super(message, cause);
        this.status = status;
        this.code = code;
        this.body = body != null ? body : JsonNodeFactory.instance.objectNode();
    }

    /** The HTTP status, or 0 when no server answered. */
    public int status() {
        return status;
    }

    /** The contract's error code ({@code lock_held}...), or null. */
    public String code() {
        return code;
    }

    /** The whole JSON answer, e.g. {@code body().get("holder")} of a LockHeldException. */
    public JsonNode body() {
        return body;
    }

    /**
     * The exception for an error answer, chosen by its code.
     *
     * @param status the HTTP status
     * @param answer the parsed JSON object, or null for an answer that is not JSON
     * @param text the answer's text, used when it is not a JSON object
     */
    public static LeasegateException fromAnswer(int status, JsonNode answer, String text) {
        if (answer == null || !answer.isObject()) {
            String shown = text.length() > 300 ? text.substring(0, 300) : text;
            ObjectNode body = JsonNodeFactory.instance.objectNode().put("text", shown);
            return new LeasegateException("HTTP " + status + ": " + shown, status, null, body);
        }
        String code = answer.path("error").isTextual() ? answer.get("error").asText() : null;
        String message = answer.path("message").isTextual() ? answer.get("message").asText()
                : code != null ? code : "HTTP " + status;
        if (code == null) {
            return new LeasegateException(message, status, null, answer);
        }
        switch (code) {
            case "bad_request": return new BadRequestException(message, status, answer);
            case "unauthorized": return new UnauthorizedException(message, status, answer);
            case "forbidden": return new ForbiddenException(message, status, answer);
            case "lock_held": return new LockHeldException(message, status, code, answer);
            case "semaphore_full": return new SemaphoreFullException(message, status, answer);
            case "limit_mismatch": return new LimitMismatchException(message, status, answer);
            case "mode_conflict": return new ModeConflictException(message, status, answer);
            case "not_holder": return new NotHolderException(message, status, answer);
            case "stale_token": return new StaleTokenException(message, status, answer);
            case "not_leader": return new NotLeaderException(message, status, answer);
            case "version_mismatch": return new VersionMismatchException(message, status, answer);
            case "token_required": return new TokenRequiredException(message, status, answer);
            case "overloaded": return new OverloadedException(message, status, answer);
            default: return new LeasegateException(message, status, code, answer);
        }
    }
}
