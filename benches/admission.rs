//! Handler-only cost of the Site webhooks (no TLS, no HTTP): decode the AdmissionReview, run the
//! handler, encode the answer, for the typical (~4 KB) and the large (~100 KB) Site. The server's
//! path decodes the Site typed (`SiteBody::decode`: the review reader; `decode only, serde_json`
//! is the same decoding by serde_json, which the server uses for bodies the reader refuses); the
//! generic path (`decode` into a `DynamicObject`, then a Site) is what bodies that are not Sites
//! take, measured for comparison.
//!
//! Run: `cargo bench --bench admission`.

#[path = "common/bodies.rs"]
mod bodies;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sites_operator::admission::{self, review};
use sites_operator::config::{Installation, PlatformConfig};
use std::hint::black_box;

// The allocator of the `sites-operator` binary, so the figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn handlers(c: &mut Criterion) {
    let cfg = PlatformConfig::from_yaml(bodies::CONFIG, "config.yaml", &Installation::default())
        .expect("platform configuration");
    let platform = admission::Platform::default();
    for (name, body) in [("typical", bodies::typical()), ("large", bodies::large())] {
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function("validate: decode+rules+encode", |b| {
            b.iter(|| {
                let site_body = review::SiteBody::new(black_box(&body)).expect("text");
                let req = site_body.decode().expect("decodes");
                let resp = admission::validate_site(&req, &cfg, &platform);
                assert!(resp.allowed, "{:?}", resp.result);
                review::encode(&resp).expect("encodes")
            })
        });
        group.bench_function("mutate: decode+stamp+encode", |b| {
            b.iter(|| {
                let site_body = review::SiteBody::new(black_box(&body)).expect("text");
                let req = site_body.decode().expect("decodes");
                let resp = admission::mutate_site(&req, &cfg, uuid::Uuid::new_v4);
                review::encode(&resp).expect("encodes")
            })
        });
        group.bench_function("decode only", |b| {
            b.iter(|| {
                let site_body = review::SiteBody::new(black_box(&body)).expect("text");
                let req = site_body.decode().expect("decodes");
                black_box(&req);
            })
        });
        group.bench_function("decode only, serde_json", |b| {
            b.iter(|| {
                let site_body = review::SiteBody::new(black_box(&body)).expect("text");
                let req = site_body.decode_with_serde_json().expect("decodes");
                black_box(&req);
            })
        });
        let site_body = review::SiteBody::new(&body).expect("text");
        assert!(
            site_body.read().is_some(),
            "the review reader reads the {name} body"
        );
        let req = site_body.decode().expect("decodes");
        group.bench_function("rules only", |b| {
            b.iter(|| admission::validate_site(black_box(&req), &cfg, &platform))
        });
        group.bench_function("generic path: decode+rules+encode", |b| {
            b.iter(|| {
                let req = review::decode(black_box(&body)).expect("decodes");
                let resp = admission::validate_site(&req, &cfg, &platform);
                assert!(resp.allowed, "{:?}", resp.result);
                review::encode(&resp).expect("encodes")
            })
        });
        group.finish();
    }
}

criterion_group!(benches, handlers);
criterion_main!(benches);
