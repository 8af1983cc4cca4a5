# leasegate server image on Debian 12.
#   build:  the compiler and -dev packages, the same steps as the README's first command
#   final:  the binary on PATH as `leasegate`, its runtime libraries and ca-certificates,
#           running as the unprivileged user `leasegate` (uid 7400) with its data in /data
#
#   docker build -t leasegate .
#   docker run -d --name leasegate -p 7400:7400 -v leasegate-data:/data leasegate
#   docker exec leasegate cat /data/admin.key      # the admin key made at the first start
#
# The server needs API keys: it reads them from /data/keys ($LEASEGATE_AUTH_FILE) and, on a
# first start without that file, makes one admin key (scripts/container-serve.sh). A host
# directory mounted on /data must be writable by uid 7400. `docker stop` sends SIGTERM: the
# server answers waiters 503, commits the last batch and exits 0.
#
# The base image of both stages (a Debian 12 mirror or a local import):
#   docker build --build-arg BASE_IMAGE=registry.example/debian:bookworm -t leasegate .
# Podman's default image format (OCI) drops HEALTHCHECK: build with
# `podman build --format docker`, or give `podman run --health-cmd 'leasegate healthcheck'`.
# docs/operations.md ("In a container") has both, and the build without a registry.
ARG BASE_IMAGE=debian:bookworm

FROM ${BASE_IMAGE} AS build
WORKDIR /src
COPY scripts/deps.sh scripts/deps.sh
RUN scripts/deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cmake -B /tmp/build -DLEASEGATE_TESTS=OFF \
 && cmake --build /tmp/build -j"$(nproc)" \
 && cmake --install /tmp/build --prefix /usr/local --strip

FROM ${BASE_IMAGE}
COPY scripts/deps.sh /tmp/deps.sh
RUN /tmp/deps.sh --runtime && rm -rf /var/lib/apt/lists/* /tmp/deps.sh \
 && useradd --system --uid 7400 --user-group --home-dir /data --shell /usr/sbin/nologin leasegate \
 && mkdir -p /data && chown leasegate:leasegate /data
COPY --from=build /usr/local/bin/leasegate /usr/local/bin/leasegate
COPY scripts/container-serve.sh /usr/local/bin/leasegate-container
USER leasegate
WORKDIR /data
VOLUME /data
EXPOSE 7400
# The health check and the client commands inside the container talk to this server, with
# the key the first start made (docker exec CONTAINER leasegate acquire --lock NAME).
ENV LEASEGATE_SERVER=http://127.0.0.1:7400 \
    LEASEGATE_AUTH_FILE=/data/keys \
    LEASEGATE_KEY_FILE=/data/admin.key
HEALTHCHECK --interval=10s --timeout=6s --start-period=10s --retries=3 CMD ["leasegate", "healthcheck"]
STOPSIGNAL SIGTERM
# Inside its own network namespace the server must listen on all addresses; only a port
# that is published reaches it, and only with a key. Flags after the image name go to
# `leasegate serve` (e.g. --allowed-host leasegate, the name other containers use);
# `--insecure-no-auth` runs it without keys, where nothing else can reach the port. A
# command after the image name runs as given (docker run IMAGE leasegate serve ...).
ENTRYPOINT ["leasegate-container"]
