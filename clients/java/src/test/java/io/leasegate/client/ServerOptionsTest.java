package io.leasegate.client;

import static io.leasegate.client.TestServer.unique;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** Servers started with options a client must cope with: large tokens, TLS, API keys. */
class ServerOptionsTest {
    @Test
    void tokensPast2To53StayExact() throws Exception {
        // --min-token: every token from now on is larger, here 2^62 (the most the server takes):
        // past what a double holds exactly. Past 2^63 - 1, see DurationsAndTokensTest.
        try (TestServer server = new TestServer("--min-token", "4611686018427387904");
             LeasegateClient client = LeasegateClient.builder().servers(server.url).build()) {
            String name = unique("java/big");
            Lease first = client.acquire(name, AcquireOptions.defaults());
            assertTrue(first.token() > 4611686018427387904L);
            assertEquals(client.status(name).get("holder").get("token").bigIntegerValue().toString(), Tokens.toString(first.token()));
            first.release();
            Lease second = client.acquire(name, AcquireOptions.defaults());
            assertTrue(Tokens.compare(second.token(), first.token()) > 0);
            FenceResult fence = client.fence(name, Tokens.toString(second.token()));
            assertEquals(second.token(), fence.maxToken());
            assertThrows(StaleTokenException.class, () -> client.fence(name, first.token()));
            second.release();
        }
    }

    /** A CA and a certificate for 127.0.0.1 that it signs, made with the openssl command: (CA, cert, key). */
    private static Path[] pki(Path dir) throws Exception {
        Path ca = dir.resolve("ca.pem");
        Path caKey = dir.resolve("ca.key");
        Path cert = dir.resolve("cert.pem");
        Path key = dir.resolve("cert.key");
        Path csr = dir.resolve("cert.csr");
        Path ext = dir.resolve("cert.ext");
        Files.writeString(ext, "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n");
        List<String> ec = List.of("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes");
        run(concat(List.of("openssl", "req", "-x509"), ec, List.of("-keyout", caKey.toString(), "-out", ca.toString(),
                "-days", "2", "-subj", "/CN=test CA", "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign")));
        run(concat(List.of("openssl", "req", "-new"), ec, List.of("-keyout", key.toString(), "-out", csr.toString(),
                "-subj", "/CN=127.0.0.1")));
        run(List.of("openssl", "x509", "-req", "-in", csr.toString(), "-CA", ca.toString(), "-CAkey", caKey.toString(),
                "-CAcreateserial", "-out", cert.toString(), "-days", "2", "-extfile", ext.toString()));
        return new Path[] {ca, cert, key};
    }

    @SafeVarargs
    private static List<String> concat(List<String>... parts) {
        List<String> all = new java.util.ArrayList<>();
        for (List<String> p : parts) {
            all.addAll(p);
        }
        return all;
    }

    private static String run(List<String> command) throws Exception {
        Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes());
        if (!p.waitFor(60, TimeUnit.SECONDS) || p.exitValue() != 0) {
            throw new IllegalStateException(command + " failed: " + out);
        }
        return out;
    }

    @Test
    void aPrivateCaVerifiesTheServerAndWithoutItTheFailureIsAtOnce() throws Exception {
        Path dir = Files.createTempDirectory("leasegate-java-tls-");
        Path[] pki = pki(dir);
        try (TestServer server = new TestServer("--tls-cert", pki[1].toString(), "--tls-key", pki[2].toString())) {
            assertTrue(server.url.startsWith("https://"));
            try (LeasegateClient client = LeasegateClient.builder().servers(server.url).caFile(pki[0]).build()) {
                String name = unique("java/tls");
                Lease lease = client.acquire(name, AcquireOptions.defaults().ttl(Duration.ofSeconds(2)));
                lease.renew();
                assertEquals(lease.token(), client.status(name).get("holder").get("token").asLong());
                lease.release();
            }
            // The JDK's CAs do not know this one: refused at once, not retried for retryFor.
            try (LeasegateClient client = LeasegateClient.builder().servers(server.url).retryFor(Duration.ofMinutes(10)).build()) {
                TlsVerificationException e = assertThrows(TlsVerificationException.class,
                        () -> client.acquire(unique("java/tls"), AcquireOptions.defaults().waitFor(Duration.ofMinutes(10))));
                assertTrue(e.getMessage().contains("caFile(PEM) or $LEASEGATE_CACERT"), e.getMessage());
                assertEquals(0, e.status());
            }
            try (TestServer plain = new TestServer();
                 LeasegateClient client = LeasegateClient.builder().servers(server.url, plain.url).build()) {
                Lease lease = client.acquire(unique("java/tls-next"), AcquireOptions.defaults());
                assertEquals(plain.url, lease.server(), "a server failing verification is passed over");
                lease.release();
            }
        } finally {
            for (Path p : Files.list(dir).toList()) {
                Files.delete(p);
            }
            Files.delete(dir);
        }
    }

    @Test
    void theApiKeyGoesWithEveryRequest() throws Exception {
        String[] keygen = run(List.of(System.getenv("LEASEGATE_BIN"), "keygen", "app", "client", "java/")).split("\n");
        Path keys = Files.createTempFile("leasegate-java-keys-", "");
        Files.writeString(keys, keygen[1] + "\n");
        try (TestServer server = new TestServer("--auth-file", keys.toString());
             LeasegateClient client = LeasegateClient.builder().servers(server.url).apiKey(keygen[0].strip()).build();
             LeasegateClient anonymous = LeasegateClient.builder().servers(server.url).build()) {
            String name = unique("java/key");
            Lease lease = client.acquire(name, AcquireOptions.defaults());
            lease.renew();
            lease.release();
            assertFalse(client.status(name).get("held").asBoolean());
            assertThrows(ForbiddenException.class, () -> client.acquire(unique("other"), AcquireOptions.defaults()));
            assertThrows(UnauthorizedException.class, () -> anonymous.acquire(unique("java/none"), AcquireOptions.defaults()));
        } finally {
            Files.delete(keys);
        }
    }
}
