package io.leasegate.fence;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.leasegate.client.AcquireOptions;
import io.leasegate.client.Lease;
import io.leasegate.client.LeasegateClient;
import io.leasegate.client.Tokens;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.lang.reflect.Constructor;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.apache.catalina.Context;
import org.apache.catalina.startup.Tomcat;
import org.apache.tomcat.util.descriptor.web.FilterDef;
import org.apache.tomcat.util.descriptor.web.FilterMap;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The fence check in front of a storage backend: FencingFilter in a real servlet container
 * (embedded Tomcat 10) before a servlet that stores what is PUT, checking tokens of real leases
 * with the real server (ServerFence, and the filter configured by init parameters) or in the
 * process (LocalFence); and FenceGate's order of writes.
 */
class FencingFilterTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static Object server; // io.leasegate.client.TestServer (package-private there)
    private static String serverUrl;
    private static LeasegateClient client;
    private static Path base;
    private static final HttpClient http = HttpClient.newHttpClient();
    private static final java.util.logging.Logger TOMCAT_LOG = java.util.logging.Logger.getLogger("org.apache");

    @BeforeAll
    static void start() throws Exception {
        Class<?> type = Class.forName("io.leasegate.client.TestServer");
        Constructor<?> make = type.getDeclaredConstructor(String[].class);
        make.setAccessible(true);
        server = make.newInstance((Object) new String[0]);
        java.lang.reflect.Field url = type.getDeclaredField("url");
        url.setAccessible(true);
        serverUrl = (String) url.get(server);
        client = LeasegateClient.builder().servers(serverUrl).build();
        base = Files.createTempDirectory("leasegate-java-tomcat-");
        TOMCAT_LOG.setLevel(java.util.logging.Level.SEVERE); // its start and stop, line by line, otherwise
    }

    @AfterAll
    static void stop() throws Exception {
        client.close();
        ((AutoCloseable) server).close();
        try (var files = Files.walk(base)) {
            files.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        }
    }

    /** The backend: keeps each PUT's body and the token the filter admitted it with. */
    static final class Store extends HttpServlet {
        private static final long serialVersionUID = 1L;
        final transient Map<String, String> objects = new ConcurrentHashMap<>();
        final transient Map<String, Long> tokens = new ConcurrentHashMap<>();

        @Override
        protected void doPut(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            String path = req.getPathInfo() == null ? req.getServletPath() : req.getServletPath() + req.getPathInfo();
            objects.put(path, new String(req.getInputStream().readAllBytes(), StandardCharsets.UTF_8));
            tokens.put(path, (Long) req.getAttribute(FencingFilter.TOKEN_ATTRIBUTE));
            resp.setStatus(201);
        }

        @Override
        protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            resp.setStatus(200);
            resp.getWriter().write("read");
        }
    }

    /** Tomcat on a free loopback port with the filter (an instance, or a class with init parameters) before the store. */
    private static Tomcat tomcat(Store store, FencingFilter filter, Map<String, String> params) throws Exception {
        Tomcat tomcat = new Tomcat();
        tomcat.setBaseDir(Files.createTempDirectory(base, "t").toString());
        tomcat.setHostname("127.0.0.1");
        tomcat.setPort(0);
        tomcat.getConnector().setProperty("address", "127.0.0.1");
        Context context = tomcat.addContext("", null);
        ((org.apache.catalina.core.StandardContext) context).setClearReferencesRmiTargets(false);
        context.setParentClassLoader(FencingFilterTest.class.getClassLoader()); // the launcher's, which has the filter
        Tomcat.addServlet(context, "store", store);
        context.addServletMapping("/*", "store");
        FilterDef def = new FilterDef();
        def.setFilterName("fence");
        if (filter != null) {
            def.setFilter(filter);
        } else {
            def.setFilterClass(FencingFilter.class.getName());
            params.forEach(def::addInitParameter);
        }
        context.addFilterDef(def);
        FilterMap map = new FilterMap();
        map.setFilterName("fence");
        map.addURLPattern("/*");
        context.addFilterMap(map);
        tomcat.start();
        return tomcat;
    }

    private static String url(Tomcat tomcat, String path) {
        return "http://127.0.0.1:" + tomcat.getConnector().getLocalPort() + path;
    }

    private static HttpResponse<String> put(Tomcat tomcat, String path, String token, String body) throws Exception {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(url(tomcat, path)))
                .PUT(HttpRequest.BodyPublishers.ofString(body));
        if (token != null) {
            request.header("Fencing-Token", token);
        }
        return http.send(request.build(), HttpResponse.BodyHandlers.ofString());
    }

    private static String unique() {
        return "files/" + UUID.randomUUID().toString().substring(0, 8);
    }

    /** Two real leases, older then newer: their tokens. */
    private static long[] twoTokens() throws Exception {
        Lease older = client.acquire("java/fence/" + UUID.randomUUID(), AcquireOptions.defaults());
        Lease newer = client.acquire("java/fence/" + UUID.randomUUID(), AcquireOptions.defaults());
        older.release();
        newer.release();
        return new long[] {older.token(), newer.token()};
    }

    private void checkRefusesStaleWrites(Tomcat tomcat, Store store, String resourcePrefix) throws Exception {
        long[] t = twoTokens();
        String path = "/" + unique();
        assertEquals(201, put(tomcat, path, Tokens.toString(t[0]), "v1").statusCode());
        assertEquals(201, put(tomcat, path, Tokens.toString(t[1]), "v2").statusCode());
        assertEquals(201, put(tomcat, path, Tokens.toString(t[1]), "v3").statusCode(), "the same token again");
        HttpResponse<String> stale = put(tomcat, path, Tokens.toString(t[0]), "old");
        assertEquals(409, stale.statusCode());
        JsonNode body = JSON.readTree(stale.body());
        assertEquals("stale_token", body.get("error").asText());
        assertEquals(t[1], body.get("max_token").asLong());
        assertEquals(resourcePrefix + path.substring(1), body.get("resource").asText());
        assertEquals("v3", store.objects.get(path), "the stale write never reached the store");
        assertEquals(t[1], store.tokens.get(path));
        HttpResponse<String> none = put(tomcat, path, null, "x");
        assertEquals(428, none.statusCode());
        assertEquals("token_required", JSON.readTree(none.body()).get("error").asText());
        assertEquals(400, put(tomcat, path, "12ab", "x").statusCode());
        assertEquals("v3", store.objects.get(path));
        HttpResponse<String> read = http.send(HttpRequest.newBuilder(URI.create(url(tomcat, path))).build(),
                HttpResponse.BodyHandlers.ofString());
        assertEquals(200, read.statusCode(), "reads pass without a token");
    }

    @Test
    void askingTheServerRefusesStaleAndMissingTokens() throws Exception {
        Store store = new Store();
        Tomcat tomcat = tomcat(store, new FencingFilter(new ServerFence(client)), null);
        try {
            checkRefusesStaleWrites(tomcat, store, "");
            String path = "/" + unique();
            HttpResponse<String> forged = put(tomcat, path, "999999999", "x");
            assertEquals(400, forged.statusCode(), "a token never issued");
            assertNull(store.objects.get(path));
        } finally {
            tomcat.stop();
            tomcat.destroy();
        }
    }

    @Test
    void configuredByInitParametersWithAPrefixOnTheServer() throws Exception {
        Store store = new Store();
        Tomcat tomcat = tomcat(store, null, Map.of("servers", serverUrl, "resource-prefix", "backend-a/"));
        try {
            checkRefusesStaleWrites(tomcat, store, "backend-a/");
        } finally {
            tomcat.stop();
            tomcat.destroy();
        }
    }

    @Test
    void keepingTheMarksInTheProcess() throws Exception {
        Store store = new Store();
        LocalFence marks = new LocalFence();
        Tomcat tomcat = tomcat(store, new FencingFilter(marks), null);
        try {
            checkRefusesStaleWrites(tomcat, store, "");
        } finally {
            tomcat.stop();
            tomcat.destroy();
        }
        assertEquals(0, marks.mark("never/seen"));
    }

    @Test
    void aGateAdmitsOneWritePerResourceAtATimeSoAnOlderTokenCannotOvertake() throws Exception {
        FenceGate gate = new FenceGate(new LocalFence());
        FenceGate.Ticket six = gate.admit("PUT", "r", "6");
        assertTrue(six.admitted());
        CompletableFuture<FenceGate.Ticket> five = new CompletableFuture<>();
        Thread waiting = new Thread(() -> five.complete(gate.admit("PUT", "r", "5")));
        waiting.start();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (waiting.getState() != Thread.State.WAITING) { // parked on the resource's turn
            assertTrue(System.nanoTime() < deadline, "the second write waits for the first");
            Thread.sleep(10);
        }
        assertFalse(five.isDone());
        try (FenceGate.Ticket other = gate.admit("PUT", "other", "1")) {
            assertTrue(other.admitted(), "another resource does not wait");
        }
        six.close(); // token 6 was applied
        FenceGate.Ticket stale = five.get(20, TimeUnit.SECONDS);
        assertFalse(stale.admitted(), "checked after 6 was applied: stale");
        assertEquals(409, stale.status());
        stale.close();
        FenceGate.Ticket seven = gate.admit("POST", "r", "7");
        assertTrue(seven.admitted());
        seven.close();
        seven.close();
        assertTrue(gate.admit("GET", "r", null).admitted(), "reads pass");
        assertEquals(0, gate.busyResources(), "no turn left behind");
    }
}
