package io.leasegate.fence;

import io.leasegate.client.LeasegateClient;
import io.leasegate.client.Tokens;
import jakarta.servlet.Filter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.FilterConfig;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.function.Function;

/**
 * A servlet filter (Jakarta Servlet 5 and later: Tomcat 10, Jetty 11, Spring Boot 3) that puts a
 * fence check in front of a storage backend's writes: the {@link FenceGate} rules (reads pass; a
 * write's {@code Fencing-Token} must be at least the highest token its resource has seen, else
 * 409 {@code stale_token}; none is 428 {@code token_required}), and one write per resource at a
 * time while the chain runs. An admitted write's token is in the request attribute
 * {@value #TOKEN_ATTRIBUTE} (a {@code Long}).
 *
 * <p>In code: {@code new FencingFilter(new ServerFence(client))} or {@code new FencingFilter(new
 * LocalFence())}, optionally with a function from the request to its resource (default: the path
 * below the context, without its leading '/'). In {@code web.xml}, with init parameters:
 * {@code servers} (leasegate's URLs, comma-separated: ask the server; absent: keep the marks here),
 * {@code resource-prefix} (put before every resource name, to keep one backend's resources apart
 * from another's on a shared server), and {@code serialize} ({@code false} to admit concurrent
 * writes to one resource).
 *
 * <p>The turn ends when the chain returns: a servlet that completes its write asynchronously
 * ({@code startAsync}) is not ordered by it.
 */
public class FencingFilter implements Filter {
    /** The request attribute that holds an admitted write's token (a Long; unsigned, see {@link Tokens}). */
    public static final String TOKEN_ATTRIBUTE = "io.leasegate.fence.token";

    private FenceGate gate;
    private Function<HttpServletRequest, String> resourceOf;
    private LeasegateClient ownClient; // made from init parameters: closed in destroy()

    /** For web.xml: configured by {@link #init(FilterConfig)}. */
    public FencingFilter() {
    }

    /** Checks with {@code check}; the resource is the request's path below its context. */
    public FencingFilter(FenceCheck check) {
        this(new FenceGate(check), FencingFilter::pathOf);
    }

    /** Checks with the gate's rules; {@code resourceOf} names the resource a request writes (null: refused). */
    public FencingFilter(FenceGate gate, Function<HttpServletRequest, String> resourceOf) {
        this.gate = gate;
        this.resourceOf = resourceOf;
    }

    /** The request's path below its context, without the leading '/': {@code /files/a.csv} is {@code files/a.csv}. */
    public static String pathOf(HttpServletRequest request) {
        String path = (request.getServletPath() == null ? "" : request.getServletPath())
                + (request.getPathInfo() == null ? "" : request.getPathInfo());
        return path.startsWith("/") ? path.substring(1) : path;
    }

    @Override
    public void init(FilterConfig config) throws ServletException {
        if (gate != null) {
            return;
        }
        String servers = config.getInitParameter("servers");
        String prefix = config.getInitParameter("resource-prefix");
        String serialize = config.getInitParameter("serialize");
        FenceCheck check;
        if (servers != null && !servers.isBlank()) {
            ownClient = LeasegateClient.builder().servers(servers).build();
            check = new ServerFence(ownClient);
        } else {
            check = new LocalFence();
        }
        gate = new FenceGate(check, serialize == null || !serialize.strip().equalsIgnoreCase("false"));
        String p = prefix == null ? "" : prefix;
        resourceOf = request -> {
            String path = pathOf(request);
            return path.isEmpty() ? null : p + path;
        };
    }

    @Override
    public void doFilter(ServletRequest request, ServletResponse response, FilterChain chain)
            throws IOException, ServletException {
        if (!(request instanceof HttpServletRequest) || !(response instanceof HttpServletResponse)) {
            chain.doFilter(request, response);
            return;
        }
        HttpServletRequest http = (HttpServletRequest) request;
        HttpServletResponse answer = (HttpServletResponse) response;
        String method = http.getMethod();
        String resource = FenceGate.isWrite(method) ? resourceOf.apply(http) : null;
        try (FenceGate.Ticket ticket = gate.admit(method, resource, http.getHeader(FenceGate.TOKEN_HEADER))) {
            if (!ticket.admitted()) {
                byte[] body = ticket.body().getBytes(StandardCharsets.UTF_8);
                answer.setStatus(ticket.status());
                answer.setContentType("application/json");
                answer.setContentLength(body.length);
                if (ticket.status() == 503) {
                    answer.setHeader("Retry-After", "1");
                }
                answer.getOutputStream().write(body);
                return;
            }
            if (ticket.decision() != null) {
                http.setAttribute(TOKEN_ATTRIBUTE, ticket.token());
            }
            chain.doFilter(request, response);
        }
    }

    @Override
    public void destroy() {
        if (ownClient != null) {
            ownClient.close();
            ownClient = null;
        }
    }
}
