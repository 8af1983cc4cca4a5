# leasegate on Debian 12: the same steps as the README's first command.
FROM debian:bookworm
WORKDIR /src
COPY . .
RUN scripts/deps.sh && cmake -B build && cmake --build build -j"$(nproc)" && rm -rf /var/lib/apt/lists/*
EXPOSE 7400
VOLUME /data
CMD ["build/leasegate", "serve", "--listen", "0.0.0.0:7400", "--data", "/data/leasegate.db"]
