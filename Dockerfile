# Build: dependencies first (cached while only src/ changes), then the service.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
# The workspace names the benchmark's load generator: its manifest must be
# there, though only the service is built.
COPY loadgen/Cargo.toml loadgen/Cargo.toml
RUN mkdir -p src loadgen/src && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
    && echo 'fn main() {}' > loadgen/src/main.rs \
    && cargo build --release --locked -p webhook-inbox && rm -rf src
COPY migrations migrations
COPY templates templates
COPY src src
# Cargo compares mtimes: make sure the real sources are newer than the stub.
RUN touch src/main.rs src/lib.rs && cargo build --release --locked -p webhook-inbox

# Run: a small image with the binary, as an unprivileged user. It holds no
# PostgreSQL server, so the embedded one cannot start here: set DATABASE_URL
# (docker-compose.yml does).
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home webhook-inbox
COPY --from=build /src/target/release/webhook-inbox /usr/local/bin/webhook-inbox
USER webhook-inbox
ENV LISTEN_ADDR=0.0.0.0:8080 LOG_FORMAT=json
EXPOSE 8080
ENTRYPOINT ["webhook-inbox"]
CMD ["serve"]
