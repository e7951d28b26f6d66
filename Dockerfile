# interlock in a container: a static binary on a distroless base, running
# as an unprivileged user, with its state in /var/lib/interlock.
#
#   docker build -t interlock .
#   docker run -p 8740:8740 -v interlock-data:/var/lib/interlock \
#     -v ./interlock.yaml:/etc/interlock/interlock.yaml:ro \
#     -e INTERLOCK_SECRET_FILE=/run/secrets/interlock_secret interlock
#
# The configuration must name API keys: the gateway listens on every
# address of the container, and refuses a non-loopback address without them.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so that a change of the source reuses their layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# modernc.org/sqlite is pure Go: no C toolchain, no libc at run time.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/interlock ./cmd/interlock \
 && /out/interlock version \
 && mkdir -p /out/data

# distroless/static: CA certificates (rediss://, HTTPS upstreams and
# webhooks), time zones and a nonroot user; no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/interlock /usr/local/bin/interlock
COPY --from=build --chown=65532:65532 /out/data /var/lib/interlock
USER 65532:65532
WORKDIR /var/lib/interlock
VOLUME ["/var/lib/interlock"]
EXPOSE 8740
# SIGTERM drains tool calls in flight; SIGHUP reloads the configuration.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/interlock"]
CMD ["serve", "--config", "/etc/interlock/interlock.yaml", "--listen", "0.0.0.0:8740", "--data", "/var/lib/interlock", "--log-format", "json"]
