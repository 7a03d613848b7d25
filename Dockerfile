# sites-operator container image: a static-ish Rust binary on a distroless, non-root base.
#   docker build -t sites-operator:dev .
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --locked --release -p sites-operator \
    && cp target/release/sites-operator /sites-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /sites-operator /sites-operator
USER 65532:65532
EXPOSE 9443 8443 8081
ENTRYPOINT ["/sites-operator"]
CMD ["run"]
